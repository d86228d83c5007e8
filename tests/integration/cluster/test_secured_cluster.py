"""A cluster with authentication and authorization on: brokers forward admin calls to each
other with their own credentials (brokerClientAuthenticationPlugin/Parameters), clients
and admins with theirs."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pulsar
import pytest

from harness.cluster_processes import ClusterProcesses

SECRET = secrets.token_bytes(32)


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


ADMIN = {"Authorization": f"Bearer {token('admin')}"}


@pytest.fixture(scope="module")
def cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterProcesses]:
    folder = tmp_path_factory.mktemp("secured-cluster")
    key = folder / "secret.key"
    key.write_bytes(SECRET)
    broker_token = folder / "broker.jwt"
    broker_token.write_text(token("broker"))
    settings = {
        "authentication_enabled": True,
        "authentication_providers": "token",
        "token_secret_key": f"file://{key}",
        "authorization_enabled": True,
        "super_user_roles": "admin,broker",
        "broker_client_authentication_plugin": (
            "org.apache.pulsar.client.impl.auth.AuthenticationToken"
        ),
        "broker_client_authentication_parameters": f"file://{broker_token}",
    }
    processes = ClusterProcesses(
        kafka_bootstrap, folder, size=2, settings=settings, http_headers=ADMIN
    )
    try:
        processes.start()
        yield processes
    finally:
        processes.stop()


def call(
    url: str, method: str = "GET", body: bytes | None = None, role: str = "admin"
) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {token(role)}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_partitioned_topic_calls_are_forwarded_with_the_brokers_credentials(
    cluster: ClusterProcesses,
) -> None:
    local = f"secured-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    base = f"/admin/v2/persistent/public/default/{local}"
    assert call(cluster[1].http_url + base + "/partitions", "PUT", b"6")[0] == 204
    client = pulsar.Client(
        cluster.service_url,
        authentication=pulsar.AuthenticationToken(token("admin")),
        operation_timeout_seconds=30,
    )
    try:
        producer = client.create_producer(
            topic,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            batching_enabled=False,
        )
        for i in range(12):
            producer.send(f"m{i}".encode())
    finally:
        client.close()
    # Partitions live on both brokers: each answer needs the other broker's part too.
    for broker in cluster:
        status, stats = call(broker.http_url + base + "/partitioned-stats")
        assert status == 200, stats
        assert stats["msgInCounter"] == 12
    # A tenant admin's (not superuser's) call is forwarded too: the broker's own role
    # asks the owner; a role without rights is refused before anything is forwarded.
    assert call(cluster[0].http_url + base + "/partitioned-stats", role="nobody")[0] == 403
    status, body = call(cluster[0].http_url + base + "/partitions", "DELETE")
    assert status == 204, body
    assert call(cluster[1].http_url + base + "/partitions")[1] == {"partitions": 0}
