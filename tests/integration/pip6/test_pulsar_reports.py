"""Deduplication failures Pulsar's users reported, each replayed against this broker with
the official client (docs/deduplication.md, "Pulsar's known failures"). The mixed batch of
apache/pulsar#6273 is in test_checkpoint_restarts.py, the restarted partitioned consumer
of #22795 in tests/chaos/test_consumer_kill.py."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka.admin import AdminClient

from dedup_broker.storage.formats import ledger_topic
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.conftest import make_broker, serve
from tests.integration.storage.test_recovery import seal


def stored(url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


def internal_stats(broker: BrokerProcess, topic: str) -> dict[str, object]:
    local = topic.removeprefix("persistent://")
    url = f"{broker.http_url}/admin/v2/persistent/{local}/internalStats"
    status, body = http_request("GET", url)
    assert status == 200, body
    stats: dict[str, object] = json.loads(body)
    return stats


def wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, broker_deduplication_enabled=True)


def test_5218_a_retry_after_a_failed_write_is_stored(
    kafka_bootstrap: str, dedup_broker: BrokerProcess, topic: str
) -> None:
    """Pulsar raised its mark before the write and dropped the retry of a failed one."""
    client = pulsar.Client(dedup_broker.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic, producer_name="p", batching_enabled=False, send_timeout_millis=60_000
        )
        last = None
        for i in range(5):
            last = producer.send(b"m%d" % i, sequence_id=i)
        assert last is not None
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        seal(
            admin, kafka_bootstrap, ledger_topic(dedup_broker.cluster_name, last.ledger_id()), probe
        )
        results: list[pulsar.Result] = []
        done = threading.Event()

        def sent(result: pulsar.Result, _: pulsar.MessageId) -> None:
            results.append(result)
            if len(results) == 5:
                done.set()

        for i in range(5, 10):  # the first of them fails in Kafka, the client resends
            producer.send_async(b"m%d" % i, sent, sequence_id=i)
        producer.flush()
        assert done.wait(90)
        assert results == [pulsar.Result.Ok] * 5
    finally:
        client.close()
    assert stored(dedup_broker.service_url, topic) == [b"m%d" % i for i in range(10)]


def test_7345_the_dedup_cursor_moves_when_only_a_namespace_policy_enables_it(
    kafka_bootstrap: str, tmp_path: Path, topic: str
) -> None:
    """Pulsar's deduplication cursor stayed behind (snapshots were timed only when the
    broker's own setting was on), holding back consumed ledgers."""
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_snapshot_interval_seconds=1,
        managed_ledger_max_entries_per_ledger=5,
        managed_ledger_min_ledger_rollover_time_minutes=0,
    )
    broker.start()
    try:
        ns = f"{broker.http_url}/admin/v2/namespaces/public/default/deduplication"
        assert http_request("POST", ns, b"true")[0] == 204
        client = pulsar.Client(broker.service_url)
        try:
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic, batching_enabled=False)  # no name given
            for i in range(23):
                producer.send(b"m%d" % i)
            for _ in range(23):
                consumer.acknowledge(consumer.receive(10_000))
            last = str(internal_stats(broker, topic)["lastConfirmedEntry"])

            def dedup_cursor_at_end() -> bool:
                cursors = internal_stats(broker, topic)["cursors"]
                assert isinstance(cursors, dict)
                return bool(cursors["pulsar.dedup"]["markDeletePosition"] == last)

            wait_for(dedup_cursor_at_end, "the deduplication cursor to reach the last entry")
            local = topic.removeprefix("persistent://")
            assert http_request("POST", f"{broker.http_url}/admin/v2/persistent/{local}/trim")[
                0
            ] in (200, 204)

            def trimmed() -> bool:
                ledgers = internal_stats(broker, topic)["ledgers"]
                assert isinstance(ledgers, list)
                return len(ledgers) == 1

            wait_for(trimmed, "the consumed ledgers to be trimmed")
        finally:
            client.close()
    finally:
        broker.stop()


def test_15224_producers_seen_before_a_restart_still_expire(
    kafka_bootstrap: str, tmp_path: Path, topic: str
) -> None:
    """Pulsar never expired producers that were gone before a restart and did not come
    back: their marks stayed for ever."""
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_enabled=True,
        broker_deduplication_producer_inactivity_timeout_minutes=0.05,  # 3 s
    )
    broker.start()
    try:
        client = pulsar.Client(broker.service_url)
        try:
            for name in ("a", "b", "c"):
                producer = client.create_producer(topic, producer_name=name)
                producer.send(b"x", sequence_id=7)
                producer.close()
        finally:
            client.close()
        broker.restart(kill=True)

        def remembered() -> int:
            dedup = internal_stats(broker, topic)["deduplication"]
            assert isinstance(dedup, dict)
            return int(dedup["producers"])

        assert remembered() == 3  # loading the topic recovered them
        wait_for(lambda: remembered() == 0, "the idle producers to be forgotten", 30)
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer(topic, producer_name="a")
            assert producer.last_sequence_id() == -1  # a new producer again
        finally:
            client.close()
    finally:
        broker.stop()


def test_21892_sustained_batched_load_with_explicit_ids_is_never_unknown(
    dedup_broker: BrokerProcess, topic: str
) -> None:
    """Pulsar answered "cannot determine whether the message is a duplicate" under
    sustained batched load with ids set by the application (its effectively-once
    functions), while a consumer read along."""
    count = 20_000
    client = pulsar.Client(dedup_broker.service_url, operation_timeout_seconds=30)
    received: list[bytes] = []
    try:
        consumer = client.subscribe(topic, "along")

        def consume() -> None:
            while len(received) < count:
                message = consumer.receive(30_000)
                received.append(message.data())
                consumer.acknowledge(message)

        reader = threading.Thread(target=consume)
        reader.start()
        producer = client.create_producer(
            topic,
            producer_name="function",
            batching_max_messages=500,
            batching_max_publish_delay_ms=1,
            max_pending_messages=5000,
            block_if_queue_full=True,
        )
        results: list[pulsar.Result] = []
        for i in range(count):
            producer.send_async(b"%d" % i, lambda r, _: results.append(r), sequence_id=i + 1)
        producer.flush()
        reader.join(60)
        assert not reader.is_alive()
    finally:
        client.close()
    assert len(results) == count and set(results) == {pulsar.Result.Ok}
    assert received == [b"%d" % i for i in range(count)]


def test_11445_a_topic_level_policy_applies_to_a_named_producer_without_send_timeout(
    kafka_bootstrap: str, tmp_path: Path, topic: str
) -> None:
    """Pulsar stored both copies of a sequence id although the topic's deduplication
    policy was set (with the broker's setting off)."""
    broker = make_broker(kafka_bootstrap, tmp_path)  # broker default: off
    broker.start()
    local = topic.removeprefix("persistent://")
    base = f"{broker.http_url}/admin/v2/persistent/{local}"
    try:
        assert http_request("POST", f"{base}/deduplicationEnabled", b"true")[0] == 204
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer(
                topic, producer_name="static", send_timeout_millis=0, batching_enabled=False
            )
            assert producer.send(b"first", sequence_id=1).entry_id() >= 0
            assert producer.send(b"again", sequence_id=1).entry_id() == -1
            assert http_request("PUT", f"{base}/unload")[0] == 204
            assert producer.send(b"after an unload", sequence_id=1).entry_id() == -1
            assert producer.send(b"second", sequence_id=2).entry_id() >= 0
        finally:
            client.close()
        broker.restart(kill=True)
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer(topic, producer_name="static", send_timeout_millis=0)
            assert producer.last_sequence_id() == 2  # the policy held across the kill
            assert producer.send(b"resent", sequence_id=2).entry_id() == -1
        finally:
            client.close()
        assert stored(broker.service_url, topic) == [b"first", b"second"]
    finally:
        broker.stop()
