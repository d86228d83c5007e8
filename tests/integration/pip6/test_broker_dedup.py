"""PIP-6 through the broker with the official client: exactly once, across restarts."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.conftest import make_broker, serve

RECEIVE_MS = 10_000


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    yield from serve(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_enabled=True,
        broker_deduplication_entries_interval=50,
    )


def _stored(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(RECEIVE_MS).data())
    reader.close()
    return out


def test_explicit_resends_are_dropped_with_receipt_minus_one(
    dedup_broker: BrokerProcess, topic: str
) -> None:
    client = pulsar.Client(dedup_broker.service_url)
    try:
        producer = client.create_producer(topic, producer_name="app-1", batching_enabled=False)
        first = [producer.send(f"m{i}".encode(), sequence_id=i * 10) for i in range(5)]
        assert all(m.entry_id() >= 0 for m in first)
        again = producer.send(b"m2-again", sequence_id=20)
        assert (again.ledger_id(), again.entry_id()) == (-1, -1)
        # 35 is below the highest stored id (40) but was never stored: a hole, new.
        assert producer.send(b"hole", sequence_id=35).entry_id() >= 0
        assert producer.send(b"hole-again", sequence_id=35).entry_id() == -1
        assert producer.send(b"next", sequence_id=41).entry_id() >= 0
        assert producer.last_sequence_id() == 41
        assert _stored(client, topic) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"hole", b"next"]
    finally:
        client.close()


def test_sequence_continuity_after_reconnect_and_restart(
    dedup_broker: BrokerProcess, topic: str
) -> None:
    client = pulsar.Client(dedup_broker.service_url)
    producer = client.create_producer(topic, producer_name="app-2", batching_enabled=False)
    for i in range(120):
        producer.send(f"{i}".encode())
    assert producer.last_sequence_id() == 119
    producer.close()
    producer = client.create_producer(topic, producer_name="app-2", batching_enabled=False)
    assert producer.last_sequence_id() == 119
    client.close()
    dedup_broker.kill()
    dedup_broker.start()
    client = pulsar.Client(dedup_broker.service_url)
    try:
        producer = client.create_producer(topic, producer_name="app-2", batching_enabled=False)
        assert producer.last_sequence_id() == 119
        # Resending old ids after the crash stores nothing.
        for i in range(110, 120):
            assert producer.send(f"{i}".encode(), sequence_id=i).entry_id() == -1
        producer.send(b"120", sequence_id=120)
        assert _stored(client, topic) == [f"{i}".encode() for i in range(121)]
    finally:
        client.close()


def test_batched_sends_with_external_ids_across_restart(
    dedup_broker: BrokerProcess, topic: str
) -> None:
    client = pulsar.Client(dedup_broker.service_url)
    producer = client.create_producer(
        topic, producer_name="batcher", batching_enabled=True, batching_max_messages=10
    )
    for i in range(100):
        producer.send_async(f"{i}".encode(), None, sequence_id=i)
    producer.flush()
    assert producer.last_sequence_id() == 99
    client.close()
    dedup_broker.kill()
    dedup_broker.start()
    client = pulsar.Client(dedup_broker.service_url)
    try:
        producer = client.create_producer(
            topic, producer_name="batcher", batching_enabled=True, batching_max_messages=10
        )
        assert producer.last_sequence_id() == 99
        for i in range(50, 150):  # half of them are replays
            producer.send_async(f"{i}".encode(), None, sequence_id=i)
        producer.flush()
        assert _stored(client, topic) == [f"{i}".encode() for i in range(150)]
    finally:
        client.close()


def test_policies_precedence_and_runtime_switch(kafka_bootstrap: str, tmp_path: Path) -> None:
    broker = make_broker(kafka_bootstrap, tmp_path)  # broker default: off
    broker.start()
    client = pulsar.Client(broker.service_url)
    try:
        name = "policy-topic"
        topic = f"persistent://public/default/{name}"
        ns_url = f"{broker.http_url}/admin/v2/namespaces/public/default/deduplication"
        topic_url = (
            f"{broker.http_url}/admin/v2/persistent/public/default/{name}/deduplicationEnabled"
        )
        stats_url = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/stats"
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        producer.send(b"a", sequence_id=1)
        assert producer.send(b"a-again", sequence_id=1).entry_id() >= 0  # dedup off: stored
        assert http_request("POST", ns_url, b"true")[0] == 204
        assert json.loads(http_request("GET", ns_url)[1]) is True
        assert json.loads(http_request("GET", stats_url)[1])["deduplicationStatus"] == "Enabled"
        producer.send(b"b", sequence_id=5)
        assert producer.send(b"b-again", sequence_id=5).entry_id() == -1
        assert http_request("POST", topic_url, b"false")[0] == 204  # topic beats namespace
        assert json.loads(http_request("GET", stats_url)[1])["deduplicationStatus"] == "Disabled"
        assert producer.send(b"b-third", sequence_id=5).entry_id() >= 0
        assert http_request("DELETE", topic_url)[0] == 204  # back to the namespace's true
        assert json.loads(http_request("GET", stats_url)[1])["deduplicationStatus"] == "Enabled"
        assert producer.send(b"c", sequence_id=6).entry_id() >= 0
        assert producer.send(b"c-again", sequence_id=6).entry_id() == -1
        assert _stored(client, topic) == [b"a", b"a-again", b"b", b"b-third", b"c"]
    finally:
        client.close()
        broker.stop()


def _dedup_internal(broker: BrokerProcess, name: str) -> dict[str, object]:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/internalStats"
    stats: dict[str, object] = json.loads(http_request("GET", url)[1])["deduplication"]
    return stats


def _wait_for_snapshot_at(broker: BrokerProcess, name: str, position: str) -> None:
    deadline = time.monotonic() + 30
    while _dedup_internal(broker, name)["lastSnapshotPosition"] != position:
        assert time.monotonic() < deadline, f"no snapshot at {position}"
        time.sleep(0.5)


def test_snapshot_interval_policy_per_namespace_and_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A quiet topic snapshots on the namespace's interval; the topic's own setting wins."""
    broker = make_broker(kafka_bootstrap, tmp_path, broker_deduplication_enabled=True)
    broker.start()  # broker default: 120 s between timer snapshots, 1000 entries
    client = pulsar.Client(broker.service_url)
    try:
        name = f"interval-{uuid.uuid4().hex[:8]}"
        ns_url = (
            f"{broker.http_url}/admin/v2/namespaces/public/default/deduplicationSnapshotInterval"
        )
        topic_url = (
            f"{broker.http_url}/admin/v2/persistent/public/default/{name}"
            "/deduplicationSnapshotInterval"
        )
        assert http_request("POST", ns_url, b"-1")[0] == 400
        assert http_request("POST", ns_url, b"soon")[0] == 400
        producer = client.create_producer(
            f"persistent://public/default/{name}", producer_name="quiet", batching_enabled=False
        )
        for i in range(3):
            last = producer.send(f"m{i}".encode(), sequence_id=i)
        assert _dedup_internal(broker, name)["snapshotIntervalSeconds"] == 120

        assert http_request("POST", ns_url, b"1")[0] == 204
        assert json.loads(http_request("GET", ns_url)[1]) == 1
        _wait_for_snapshot_at(broker, name, f"{last.ledger_id()}:{last.entry_id()}")

        assert http_request("POST", topic_url, b"0")[0] == 204  # 0: no timer snapshots
        assert json.loads(http_request("GET", topic_url)[1]) == 0
        assert _dedup_internal(broker, name)["snapshotIntervalSeconds"] == 0
        snapshot_before = _dedup_internal(broker, name)["lastSnapshotPosition"]
        later = producer.send(b"later", sequence_id=10)
        time.sleep(7)  # longer than the broker's housekeeping period, with a 1 s namespace rule
        assert _dedup_internal(broker, name)["lastSnapshotPosition"] == snapshot_before

        assert http_request("DELETE", topic_url)[0] == 204  # back to the namespace's 1 s
        _wait_for_snapshot_at(broker, name, f"{later.ledger_id()}:{later.entry_id()}")
        assert http_request("DELETE", ns_url)[0] == 204
        assert _dedup_internal(broker, name)["snapshotIntervalSeconds"] == 120
    finally:
        client.close()
        broker.stop()
