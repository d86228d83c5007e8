"""Forged intents delete nothing; failed deletes are retried then dead-lettered; two workers
share the load. Counts in metrics and the in-flight figure match what happened."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from dedup_broker.storage import formats
from dedup_broker.storage.values import LedgerType
from system_topics.intents import DeletionIntent, encode_intent
from system_topics.mark_phase import intent_key
from system_topics.topics import RECONSUME_TIMES
from tests.integration.system_topics.deletion_helpers import Cluster, metric, wait_until

P = "dedup_broker_ledger_deletion_"


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(kafka_bootstrap, tmp_path, two_phase_deletion_max_retry_delete_count=2)
    c.broker.start()
    try:
        yield c
    finally:
        c.stop()


def _publish(cluster: Cluster, topic: str, count: int) -> None:
    """Publish ``count`` messages, kept by a subscription that acknowledges none."""
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        # A durable subscription that consumes nothing: no ledger is trimmed.
        client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(b"m-%d" % i)
    finally:
        client.close()


def _read_all(cluster: Cluster, topic: str) -> list[bytes]:
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


def _records(bootstrap: str, topic: str, partitions: int) -> list[dict[str, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        found = []
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while len(found) < 10_000:
                msg = consumer.poll(5)
                assert msg is not None and msg.error() is None
                found.append(dict(msg.headers() or []))
                if (msg.offset() or 0) + 1 >= high:
                    break
        return found
    finally:
        consumer.close()


def test_forged_intents_of_every_kind_delete_nothing(cluster: Cluster) -> None:
    worker = cluster.add_worker()
    topic = f"persistent://public/default/kept-{uuid.uuid4().hex[:8]}"
    _publish(cluster, topic, 12)
    ledgers = cluster.ledgers_of(topic)
    name = "public/default/persistent/" + topic.rsplit("/", 1)[1]
    # A topic named like a ledger, with an allocated id, that is not a ledger at all.
    config = cluster.config()
    ids_topic = f"{cluster.name}.ledger-ids"
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    fake_ids: list[int] = []
    producer.produce(
        ids_topic,
        formats.encode_ledger_id_allocation("forger", 0, "public/default/persistent/x"),
        partition=0,
        on_delivery=lambda err, msg: fake_ids.append(msg.offset()),
    )
    producer.flush(10)
    fake = formats.ledger_topic(cluster.name, fake_ids[0])
    cluster.admin.create_topics([NewTopic(fake, 1)])[fake].result()
    producer.produce(fake, b"not a ledger header", partition=0)
    producer.flush(10)

    forged: list[bytes | None] = [
        b"\x08\x96\x01 garbage",  # malformed
        encode_intent(DeletionIntent(name, 10**12)),  # never allocated: not ours
        encode_intent(DeletionIntent(name, ledgers[0])),  # still listed: in use
        encode_intent(DeletionIntent("public/default/persistent/other", ledgers[1])),  # mismatch
        encode_intent(DeletionIntent("public/default/persistent/x", fake_ids[0])),  # not a ledger
        encode_intent(
            DeletionIntent(name, ledgers[2], ledger_type=LedgerType.OFFLOAD_LEDGER)
        ),  # no offload
    ]
    for value in forged:
        producer.produce(config.two_phase_deletion_topic, value, intent_key(len(value or b"")))
    producer.flush(10)

    wait_until(lambda: metric(worker.http_url, P + "intents_acknowledged_total") == 6, 60)
    assert cluster.in_flight() == 0
    assert set(ledgers) | {fake_ids[0]} <= cluster.ledger_topics()
    assert _read_all(cluster, topic) == [b"m-%d" % i for i in range(12)]
    rejected = {
        reason: metric(worker.http_url, P + "intents_rejected_total", f'reason="{reason}"')
        for reason in ("malformed", "not-ours", "in-use", "mismatch")
    }
    assert rejected == {"malformed": 1, "not-ours": 2, "in-use": 1, "mismatch": 2}
    assert metric(worker.http_url, P + "ledgers_deleted_total", 'type="ledger"') == 0


def test_failing_deletes_are_retried_then_dead_lettered(cluster: Cluster) -> None:
    worker = cluster.add_worker(deletion_worker_inject_delete_failures="all")
    topic = f"persistent://public/default/doomed-{uuid.uuid4().hex[:8]}"
    _publish(cluster, topic, 12)
    ledgers = cluster.ledgers_of(topic)
    cluster.admin_json("DELETE", "/admin/v2/persistent/" + topic.removeprefix("persistent://"))
    n = len(ledgers)
    assert n >= 3
    wait_until(lambda: metric(worker.http_url, P + "max_retries_reached_total") == n, 90, "DLQ")
    config = cluster.config()
    dlq = _records(cluster.bootstrap, config.two_phase_deletion_dead_letter_topic, 1)
    assert sorted(h[RECONSUME_TIMES] for h in dlq) == [b"2"] * n
    assert all(h["REAL_TOPIC"] == config.two_phase_deletion_topic.encode() for h in dlq)
    retries = _records(cluster.bootstrap, config.two_phase_deletion_retry_topic, 4)
    assert sorted(h[RECONSUME_TIMES] for h in retries) == [b"1"] * n + [b"2"] * n
    assert metric(worker.http_url, P + "intents_retried_total") == 2 * n
    assert metric(worker.http_url, P + "failed_total") == 3 * n
    assert metric(worker.http_url, P + "intents_received_total") == 3 * n
    wait_until(lambda: cluster.in_flight() == 0, 30, "nothing in flight")
    # Nothing was deleted; the doctor names exactly these ledgers as orphans.
    assert set(ledgers) <= cluster.ledger_topics()
    assert cluster.doctor()["orphans"] == sorted(ledgers)


def test_two_workers_share_the_load(cluster: Cluster) -> None:
    first, second = cluster.add_worker(), cluster.add_worker()
    topics = [f"persistent://public/default/many-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    ledgers: list[int] = []
    for topic in topics:
        _publish(cluster, topic, 40)
        ledgers += cluster.ledgers_of(topic)
    for topic in topics:
        cluster.admin_json("DELETE", "/admin/v2/persistent/" + topic.removeprefix("persistent://"))
    deleted = P + "ledgers_deleted_total"

    def total() -> float:
        return sum(metric(w.http_url, deleted, 'type="ledger"') for w in (first, second))

    # An intent redelivered after a rebalance (processed, not yet committed) is deleted
    # again, idempotently, and counted again: the count may exceed the ledgers.
    wait_until(
        lambda: not (set(ledgers) & cluster.ledger_topics()) and total() >= len(ledgers),
        90,
        "all ledgers deleted",
    )
    assert metric(first.http_url, deleted, 'type="ledger"') > 0
    assert metric(second.http_url, deleted, 'type="ledger"') > 0
    assert metric(
        cluster.broker.http_url, "dedup_broker_ledger_deletion_intents_sent_total", 'type="ledger"'
    ) == len(ledgers)
    wait_until(lambda: cluster.in_flight() == 0, 30, "nothing in flight")
    assert cluster.doctor()["ok"]
