"""Authorization with the official client and the admin API: tenants and their admins,
namespace permissions (produce, consume), superusers, the reserved system namespace."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pulsar
import pytest

from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve

SECRET = secrets.token_bytes(32)
ROLES = ("admin", "alice", "bob", "carol", "dave")


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def broker(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    folder = tmp_path_factory.mktemp("authorization")
    key = folder / "secret.key"
    key.write_bytes(SECRET)
    yield from serve(
        kafka_bootstrap,
        folder,
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=f"file://{key}",
        authorization_enabled=True,
        super_user_roles="admin",
    )


def admin_call(
    broker: BrokerProcess, role: str | None, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if role is not None:
        headers["Authorization"] = f"Bearer {token(role)}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        broker.http_url + path, data=data, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode() or "null")


def client_of(broker: BrokerProcess, role: str) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(token(role)),
        operation_timeout_seconds=10,
    )


@pytest.fixture(scope="module")
def tenant(broker: BrokerProcess) -> str:
    """A tenant administered by alice, with a namespace where bob produces and carol
    consumes (set up through the admin API, by the superuser and the tenant admin)."""
    name = f"acme-{uuid.uuid4().hex[:6]}"
    assert (
        admin_call(broker, "admin", "PUT", f"/admin/v2/tenants/{name}", {"adminRoles": ["alice"]})[
            0
        ]
        == 204
    )
    assert admin_call(broker, "alice", "PUT", f"/admin/v2/namespaces/{name}/app")[0] == 204
    base = f"/admin/v2/namespaces/{name}/app/permissions"
    assert admin_call(broker, "alice", "POST", f"{base}/bob", ["produce"])[0] == 204
    assert admin_call(broker, "alice", "POST", f"{base}/carol", ["consume"])[0] == 204
    return name


def test_permissions_decide_who_produces_and_who_consumes(
    broker: BrokerProcess, tenant: str
) -> None:
    topic = f"persistent://{tenant}/app/orders-{uuid.uuid4().hex[:6]}"
    carol = client_of(broker, "carol")
    bob = client_of(broker, "bob")
    try:
        consumer = carol.subscribe(topic, "audit")
        producer = bob.create_producer(topic)
        sent = [f"order-{i}".encode() for i in range(20)]
        for payload in sent:
            producer.send(payload)
        received = []
        for _ in sent:
            message = consumer.receive(timeout_millis=10_000)
            received.append(message.data())
            consumer.acknowledge(message)
        assert received == sent
        with pytest.raises(pulsar.AuthorizationError):
            bob.subscribe(topic, "sneaky")  # produce only
        with pytest.raises(pulsar.AuthorizationError):
            carol.create_producer(topic)  # consume only
    finally:
        bob.close()
        carol.close()


def test_a_role_without_permission_cannot_look_up(broker: BrokerProcess, tenant: str) -> None:
    """The refusal is final for the client: it fails at once, not at its 10 s timeout."""
    dave = client_of(broker, "dave")
    try:
        started = time.monotonic()
        with pytest.raises(pulsar.AuthorizationError):
            dave.create_producer(f"persistent://{tenant}/app/t")
        with pytest.raises(pulsar.AuthorizationError):
            dave.subscribe(f"persistent://{tenant}/app/t", "s")
        assert time.monotonic() - started < 5.0
        # A tenant that does not exist is not found, before permissions are looked at.
        with pytest.raises(pulsar.TopicNotFound):
            dave.create_producer("persistent://nosuchtenant/app/t")
    finally:
        dave.close()


def test_revoked_permissions_apply_at_once(broker: BrokerProcess, tenant: str) -> None:
    base = f"/admin/v2/namespaces/{tenant}/app/permissions"
    assert admin_call(broker, "alice", "POST", f"{base}/erin", ["produce", "consume"])[0] == 204
    status, permissions = admin_call(broker, "alice", "GET", base)
    assert status == 200
    assert permissions["erin"] == ["produce", "consume"]
    assert permissions["bob"] == ["produce"]
    erin = client_of(broker, "erin")
    topic = f"persistent://{tenant}/app/revoked-{uuid.uuid4().hex[:6]}"
    try:
        erin.create_producer(topic).send(b"before")
        assert admin_call(broker, "alice", "DELETE", f"{base}/erin")[0] == 204
        with pytest.raises(pulsar.AuthorizationError):
            erin.create_producer(topic + "-next")
    finally:
        erin.close()


def test_tenant_admin_and_superuser_rights_over_the_admin_api(
    broker: BrokerProcess, tenant: str
) -> None:
    # The tenant admin manages its own tenant's namespaces, topics and policies...
    assert admin_call(broker, "alice", "GET", f"/admin/v2/tenants/{tenant}") == (
        200,
        {"adminRoles": ["alice"], "allowedClusters": [broker.cluster_name]},
    )
    assert admin_call(broker, "alice", "GET", f"/admin/v2/namespaces/{tenant}") == (
        200,
        [f"{tenant}/app"],
    )
    assert admin_call(broker, "alice", "PUT", f"/admin/v2/persistent/{tenant}/app/made")[0] == 204
    assert admin_call(broker, "alice", "GET", f"/admin/v2/persistent/{tenant}/app")[0] == 200
    # ...but creates no tenant, and touches no other tenant.
    status, body = admin_call(broker, "alice", "PUT", "/admin/v2/tenants/rogue", {})
    assert status == 403
    assert "superusers only" in body["reason"]
    status, body = admin_call(broker, "alice", "GET", "/admin/v2/persistent/public/default")
    assert status == 403  # listing a namespace's topics needs produce or consume there
    assert "role 'alice' is not authorized" in body["reason"]
    status, body = admin_call(
        broker, "alice", "GET", "/admin/v2/namespaces/public/default/permissions"
    )
    assert status == 403
    assert "not an admin of tenant public" in body["reason"]
    # A role with produce permission is no admin; an unauthenticated call is a 401.
    # (it may list the namespace's topics, as Pulsar's GET_TOPICS allows produce or consume)
    assert admin_call(broker, "bob", "GET", f"/admin/v2/persistent/{tenant}/app")[0] == 200
    assert (
        admin_call(broker, "bob", "GET", f"/admin/v2/namespaces/{tenant}/app/permissions")[0] == 403
    )
    assert admin_call(broker, "bob", "PUT", f"/admin/v2/persistent/{tenant}/app/bobs")[0] == 403
    assert admin_call(broker, None, "GET", f"/admin/v2/persistent/{tenant}/app")[0] == 401
    # The superuser does everything: listing tenants, clusters, other tenants' topics.
    status, tenants = admin_call(broker, "admin", "GET", "/admin/v2/tenants")
    assert status == 200
    assert tenant in tenants and "public" in tenants
    assert admin_call(broker, "admin", "GET", "/admin/v2/persistent/public/default")[0] == 200
    # A tenant with namespaces is not deleted; a non-empty namespace neither.
    status, body = admin_call(broker, "admin", "DELETE", f"/admin/v2/tenants/{tenant}")
    assert status == 409
    status, body = admin_call(broker, "alice", "DELETE", f"/admin/v2/namespaces/{tenant}/app")
    assert status == 409
    assert "non empty" in body["reason"]


def test_lookups_over_http_need_a_permission(broker: BrokerProcess, tenant: str) -> None:
    path = f"/lookup/v2/topic/persistent/{tenant}/app/t"
    assert admin_call(broker, "bob", "GET", path)[0] == 200
    assert admin_call(broker, "dave", "GET", path)[0] == 403


def test_the_system_namespace_is_for_superusers_only(broker: BrokerProcess) -> None:
    assert admin_call(
        broker, "admin", "PUT", "/admin/v2/tenants/pulsar", {"adminRoles": ["alice"]}
    )[0] in (204, 409)
    alice = client_of(broker, "alice")
    admin = client_of(broker, "admin")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            alice.create_producer("persistent://pulsar/system/anything")
        admin.create_producer("persistent://pulsar/system/anything").send(b"ok")
    finally:
        alice.close()
        admin.close()


def test_anonymous_clients_are_refused(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=3)
    try:
        with pytest.raises((pulsar.AuthenticationError, pulsar.Timeout, pulsar.ConnectError)):
            client.create_producer("persistent://public/default/anonymous")
    finally:
        client.close()


def test_bad_bodies_are_refused(broker: BrokerProcess, tenant: str) -> None:
    base = f"/admin/v2/namespaces/{tenant}/app/permissions"
    status, body = admin_call(broker, "alice", "POST", f"{base}/x", ["publish"])
    assert status == 400
    assert "unknown action" in body["reason"]
    status, body = admin_call(broker, "admin", "PUT", "/admin/v2/tenants/bad", {"adminRoles": "x"})
    assert status == 400
    status, _ = admin_call(
        broker, "admin", "PUT", "/admin/v2/tenants/far", {"allowedClusters": ["mars"]}
    )
    assert status == 400
    assert admin_call(broker, "alice", "PUT", f"/admin/v2/namespaces/{tenant}/app")[0] == 409
    assert admin_call(broker, "admin", "PUT", "/admin/v2/namespaces/nobody/ns")[0] == 404


def test_topic_permissions(broker: BrokerProcess, tenant: str) -> None:
    shared = f"persistent://{tenant}/app/shared-{uuid.uuid4().hex[:6]}"
    private = f"persistent://{tenant}/app/private-{uuid.uuid4().hex[:6]}"
    path = "/admin/v2/persistent/" + shared.removeprefix("persistent://") + "/permissions"
    assert admin_call(broker, "alice", "POST", f"{path}/frank", ["consume"])[0] == 204
    status, merged = admin_call(broker, "alice", "GET", path)
    assert status == 200
    assert merged["frank"] == ["consume"] and merged["bob"] == ["produce"]
    assert admin_call(broker, "bob", "POST", f"{path}/frank", ["produce"])[0] == 403
    frank = client_of(broker, "frank")
    try:
        frank.subscribe(shared, "mine")
        with pytest.raises(pulsar.AuthorizationError):
            frank.subscribe(private, "mine")
        with pytest.raises(pulsar.AuthorizationError):
            frank.create_producer(shared)
    finally:
        frank.close()
