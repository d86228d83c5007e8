"""Backlog quotas with ``pulsar-admin`` and the Python client: a held producer times out
as on Pulsar, a ``producer_exception`` quota refuses producers at once, an eviction
quota moves a slow subscription on (``backlogQuotaCheckIntervalInSeconds=1``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
import requests

from harness.broker_process import BrokerProcess
from harness.pulsar_tools import ensure_pulsar_tools, run_pulsar_admin_batch, write_client_conf
from tests.integration.conftest import serve

PAYLOAD = b"x" * 1024


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap,
        tmp_path_factory.mktemp("backlog"),
        backlog_quota_check_interval_in_seconds=1,
    )


def namespace_with_quota(broker: BrokerProcess, folder: Path, *quota: str) -> str:
    """A new namespace with a backlog quota set by ``pulsar-admin``."""
    namespace = f"public/quota-{uuid.uuid4().hex[:6]}"
    ensure_pulsar_tools()
    conf = write_client_conf(folder / "client.conf", broker.service_url, broker.http_url)
    outcomes = run_pulsar_admin_batch(
        conf,
        [
            ["namespaces", "create", namespace],
            ["namespaces", "set-backlog-quota", namespace, *quota],
            ["namespaces", "get-backlog-quotas", namespace],
        ],
    )
    for outcome in outcomes:
        assert outcome.exit_code == 0, (outcome.args, outcome.output)
    assert "destination_storage" in outcomes[2].output
    return namespace


def fill(client: pulsar.Client, topic: str, count: int = 40) -> pulsar.Consumer:
    consumer = client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(count):
        producer.send(PAYLOAD)
    producer.close()
    return consumer


def set_topic_quota(broker: BrokerProcess, topic: str, quota: dict[str, object]) -> str:
    """A topic-level quota, as the Java and Go admin clients send it; the topic's path."""
    path = f"{broker.http_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}"
    response = requests.post(
        f"{path}/backlogQuota",
        params={"backlogQuotaType": "destination_storage"},
        json=quota,
        timeout=10,
    )
    assert response.status_code == 204
    return path


def test_a_held_producer_times_out_until_the_backlog_shrinks(served: BrokerProcess) -> None:
    topic = f"persistent://public/default/held-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(served.service_url, operation_timeout_seconds=5)
    try:
        consumer = client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=3000)
        for _ in range(20):
            producer.send(PAYLOAD)
        hold = {"limitSize": 8 * 1024, "limitTime": -1, "policy": "producer_request_hold"}
        set_topic_quota(served, topic, hold)
        time.sleep(3)  # the check disconnects the producer; it may not come back
        with pytest.raises(pulsar.Timeout):
            producer.send(PAYLOAD)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
            client.create_producer(topic)
        while True:
            try:
                consumer.acknowledge(consumer.receive(timeout_millis=2000))
            except pulsar.Timeout:
                break
        time.sleep(2)  # acknowledgements stored, the producer reconnects
        assert producer.send(PAYLOAD) is not None
    finally:
        client.close()


def test_a_producer_exception_quota_refuses_producers(
    served: BrokerProcess, tmp_path: Path
) -> None:
    namespace = namespace_with_quota(served, tmp_path, "-l", "8K", "-p", "producer_exception")
    topic = f"persistent://{namespace}/refused"
    client = pulsar.Client(served.service_url, operation_timeout_seconds=5)
    try:
        client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):  # at once
            for _ in range(200):
                producer.send(PAYLOAD)
                time.sleep(0.05)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
    finally:
        client.close()


def test_eviction_moves_the_slow_subscription_on(served: BrokerProcess) -> None:
    """A topic-level quota set over HTTP (the Java and Go admin clients' body)."""
    topic = f"persistent://public/default/evict-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(served.service_url, operation_timeout_seconds=5)
    try:
        fill(client, topic)
        quota = {"limitSize": 10 * 1024, "limitTime": -1, "policy": "consumer_backlog_eviction"}
        path = set_topic_quota(served, topic, quota)
        stored = requests.get(f"{path}/backlogQuotaMap", timeout=10).json()
        assert stored["destination_storage"]["limitSize"] == 10 * 1024
        deadline = time.monotonic() + 15
        backlog = 40
        while time.monotonic() < deadline and backlog > 10:
            time.sleep(0.5)
            stats = requests.get(f"{path}/stats", timeout=10).json()
            backlog = stats["subscriptions"]["slow"]["msgBacklog"]
        assert backlog <= 10
    finally:
        client.close()
