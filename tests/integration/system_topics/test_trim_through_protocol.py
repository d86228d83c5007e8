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
