"""Consumed ledgers disappear through two-phase deletion; retention and backlog are kept."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.integration.system_topics.deletion_helpers import Cluster, metric, wait_until

SENT = "dedup_broker_ledger_deletion_intents_sent_total"
DELETED = "dedup_broker_ledger_deletion_ledgers_deleted_total"


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(kafka_bootstrap, tmp_path)
    c.broker.start()
    try:
        yield c
    finally:
        c.stop()


def test_consumed_ledgers_are_deleted_and_the_backlog_stays_readable(cluster: Cluster) -> None:
    worker = cluster.add_worker()
    topic = f"persistent://public/default/trim-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(60):
            producer.send(b"m-%d" % i)
        all_ledgers = cluster.ledgers_of(topic)
        assert len(all_ledgers) >= 12  # 5 entries per ledger

        # Retention of 10 minutes keeps consumed ledgers.
        cluster.admin_json(
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            b'{"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}',
        )
        assert cluster.admin_json("GET", "/admin/v2/namespaces/public/default/retention") == {
            "retentionTimeInMinutes": 10,
            "retentionSizeInMB": -1,
        }
        for i in range(40):
            msg = consumer.receive(10_000)
            assert msg.data() == b"m-%d" % i
            consumer.acknowledge(msg)
        consumer.close()  # flushes the acknowledgements
        cluster.trim(topic)
        assert cluster.ledgers_of(topic) == all_ledgers

        # Without retention the consumed ledgers go: first out of the list, then storage.
        cluster.admin_json("DELETE", "/admin/v2/namespaces/public/default/retention")
        cluster.trim(topic)
        remaining = cluster.ledgers_of(topic)
        trimmed = [ledger for ledger in all_ledgers if ledger not in remaining]
        assert trimmed == all_ledgers[:8]  # entries 0..39 filled ledgers 1-8 exactly
        wait_until(
            lambda: not (cluster.ledger_topics() & set(trimmed)), what="ledger topics deleted"
        )
        assert set(remaining) <= cluster.ledger_topics()

        # Every unconsumed message is still there.
        consumer = client.subscribe(topic, "sub")
        received = [consumer.receive(10_000).data() for _ in range(20)]
        assert received == [b"m-%d" % i for i in range(40, 60)]
        consumer.close()

        wait_until(lambda: cluster.in_flight() == 0, what="no deletion in flight")
        assert metric(cluster.broker.http_url, SENT, 'type="ledger"') == len(trimmed)
        assert metric(worker.http_url, DELETED, 'type="ledger"') == len(trimmed)
        report = cluster.doctor()
        assert report["orphans"] == [] and report["missing"] == [], report
    finally:
        client.close()


def test_a_topic_without_subscriptions_follows_an_explicit_retention_policy_only(
    cluster: Cluster,
) -> None:
    cluster.add_worker()
    topic = f"persistent://public/default/nosub-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        payload = b"x" * 100_000
        for i in range(30):
            producer.send(b"%03d" % i + payload)
        all_ledgers = cluster.ledgers_of(topic)
        assert len(all_ledgers) >= 6  # 5 entries (500 kB) per ledger

        cluster.trim(topic)  # no policy anywhere: nobody consumed it, all of it stays
        assert cluster.ledgers_of(topic) == all_ledgers

        cluster.admin_json(
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            b'{"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}',
        )
        try:
            cluster.trim(topic)
        finally:
            cluster.admin_json("DELETE", "/admin/v2/namespaces/public/default/retention")
        remaining = cluster.ledgers_of(topic)
        assert remaining == all_ledgers[-len(remaining) :]
        assert 2 <= len(remaining) < len(all_ledgers)  # about 1 MB kept, the oldest gone

        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        kept = []
        while reader.has_message_available():
            kept.append(int(reader.read_next(10_000).data()[:3]))
        reader.close()
        assert kept == list(range(30 - len(kept), 30)) and len(kept) >= 5
    finally:
        client.close()
