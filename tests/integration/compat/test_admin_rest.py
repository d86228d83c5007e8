"""The admin REST shapes the Java and Go admin clients use: partitions as a
``PartitionedTopicMetadata`` body, a namespace's topics, topic stats as their models read
them, messages by id and by position, and terminated topics (with ``pulsar-admin`` 4.0,
the Python client and the Java client)."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests

from harness.broker_process import BrokerProcess
from harness.pulsar_java import ensure_java_client, java_consume
from harness.pulsar_tools import ensure_pulsar_tools, run_pulsar_admin_batch, write_client_conf
from tests.integration.conftest import serve


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path_factory.mktemp("admin-rest"))


def path_of(topic: str) -> str:
    return topic.removeprefix("persistent://")


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def position_args(message_id: pulsar.MessageId) -> list[str]:
    return ["-l", str(message_id.ledger_id()), "-e", str(message_id.entry_id())]


def admin(broker: BrokerProcess, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, broker.http_url + path, timeout=15, **kwargs)


def test_partitions_as_pulsar_metadata_and_namespace_topics(served: BrokerProcess) -> None:
    """The Go and Java admin clients send ``{"partitions": N, "properties": ...}``."""
    topic = new_topic("parts")
    url = f"/admin/v2/persistent/{path_of(topic)}/partitions"
    body = {"partitions": 2, "properties": None}
    assert admin(served, "PUT", url, json=body).status_code == 204
    assert admin(served, "POST", url, json={"partitions": 3}).status_code == 204
    assert admin(served, "GET", url).json() == {"partitions": 3}
    other = f"/admin/v2/persistent/{path_of(topic)}-x/partitions"
    assert admin(served, "PUT", other, data=b"{}").status_code == 400
    listed = admin(served, "GET", "/admin/v2/namespaces/public/default/topics").json()
    assert {f"{topic}-partition-{i}" for i in range(3)} <= set(listed)


def test_stats_as_the_admin_models_read_them(served: BrokerProcess) -> None:
    """``connectedSince`` is Pulsar's date string (the Go model's type), producers and
    consumers carry their properties as ``metadata``."""
    topic = new_topic("stats")
    client = pulsar.Client(served.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s", properties={"team": "billing"})
        producer = client.create_producer(topic, properties={"app": "checkout"})
        producer.send(b"x")
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        stats = admin(served, "GET", f"/admin/v2/persistent/{path_of(topic)}/stats").json()
    finally:
        client.close()
    (publisher,) = stats["publishers"]
    (consumer_stats,) = stats["subscriptions"]["s"]["consumers"]
    for connected in (publisher["connectedSince"], consumer_stats["connectedSince"]):
        assert isinstance(connected, str) and connected.endswith("Z")
        moment = datetime.datetime.fromisoformat(connected)
        assert abs((datetime.datetime.now(datetime.UTC) - moment).total_seconds()) < 120
    assert publisher["metadata"] == {"app": "checkout"}
    assert consumer_stats["metadata"] == {"team": "billing"}
    assert publisher["clientVersion"].startswith("Pulsar")


def test_messages_by_id_and_position_and_termination(served: BrokerProcess, tmp_path: Path) -> None:
    """``get-message-by-id`` and ``examine-message`` (HTTP and pulsar-admin), then
    ``terminate``: producers are refused with TopicTerminated, a Java consumer reads
    everything and hears the end of the topic."""
    topic = new_topic("messages")
    client = pulsar.Client(served.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        first = producer.send(b"first", properties={"k": "v"}, partition_key="key-1")
        producer.send(b"second")
        last = producer.send(b"third")
        base = f"/admin/v2/persistent/{path_of(topic)}"
        by_id = admin(served, "GET", f"{base}/ledger/{first.ledger_id()}/entry/{first.entry_id()}")
        assert by_id.status_code == 200 and by_id.content == b"first"
        assert by_id.headers["X-Pulsar-PROPERTY-k"] == "v"
        assert by_id.headers["X-Pulsar-partition-key"] == "key-1"
        assert by_id.headers["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
        missing = admin(served, "GET", f"{base}/ledger/{last.ledger_id()}/entry/999")
        assert missing.status_code == 404
        query = {"initialPosition": "earliest", "messagePosition": "2"}
        assert admin(served, "GET", f"{base}/examinemessage", params=query).content == b"second"
        latest = admin(served, "GET", f"{base}/examinemessage")
        assert latest.content == b"third"

        terminated = admin(served, "POST", f"{base}/terminate").json()
        assert (terminated["ledgerId"], terminated["entryId"]) == (
            last.ledger_id(),
            last.entry_id(),
        )
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"too late")
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
    finally:
        client.close()
    ensure_java_client()
    consumed = java_consume(served.service_url, topic, "after-end", 4, timeout_ms=3000)
    assert [m.value for m in consumed.messages] == ["first", "second", "third"]
    assert consumed.end_of_topic

    ensure_pulsar_tools()
    conf = write_client_conf(tmp_path / "client.conf", served.service_url, served.http_url)
    outcomes = run_pulsar_admin_batch(
        conf,
        [
            ["topics", "get-message-by-id", topic, *position_args(first)],
            ["topics", "examine-messages", topic, "-i", "latest", "-m", "1"],
            ["topics", "stats", topic],
            ["topics", "terminate", topic],
        ],
    )
    for outcome in outcomes:
        assert outcome.exit_code == 0, (outcome.args, outcome.output)
    assert "first" in outcomes[0].output
    assert "third" in outcomes[1].output
    assert json.loads(outcomes[2].output)["subscriptions"]["after-end"]["msgBacklog"] == 0
