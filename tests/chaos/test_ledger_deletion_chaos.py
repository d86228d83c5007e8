"""Broker and worker killed with SIGKILL at random points while ledgers are trimmed:
afterwards no orphan, no listed ledger missing, every unconsumed message readable."""

from __future__ import annotations

import random
import threading
import uuid
from pathlib import Path

import pulsar
import pytest

from harness.admin_http import http_request
from tests.integration.system_topics.deletion_helpers import Cluster, wait_until

pytestmark = pytest.mark.chaos

CYCLES = 4
PER_CYCLE = 25
ACKED_PER_CYCLE = 20


def test_kills_during_trimming_leave_no_orphans_and_lose_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    rng = random.Random(7)
    cluster = Cluster(kafka_bootstrap, tmp_path, two_phase_deletion_max_retry_delete_count=50)
    cluster.broker.start()
    worker = cluster.add_worker()
    topic = f"persistent://public/default/chaos-{uuid.uuid4().hex[:8]}"
    trim_path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/trim"
    published = 0
    acked = 0
    try:
        for _ in range(CYCLES):
            client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
            try:
                consumer = client.subscribe(
                    topic, "sub", initial_position=pulsar.InitialPosition.Earliest
                )
                producer = client.create_producer(topic, batching_enabled=False)
                for _ in range(PER_CYCLE):
                    producer.send(b"m-%d" % published)
                    published += 1
                target = acked + ACKED_PER_CYCLE
                while acked < target:
                    msg = consumer.receive(10_000)
                    consumer.acknowledge_cumulative(msg)
                    acked = int(msg.data().split(b"-")[1]) + 1
                consumer.close()
            finally:
                client.close()
            trimming = threading.Thread(
                target=http_request, args=("POST", cluster.broker.http_url + trim_path)
            )
            trimming.start()
            threading.Event().wait(rng.uniform(0, 0.3))
            victim = cluster.broker if rng.random() < 0.5 else worker
            victim.kill()
            trimming.join(60)
            victim.start()
        # Quiet: one more trim, the worker drains, everything adds up.
        cluster.trim(topic)
        wait_until(lambda: cluster.in_flight() == 0, 120, "deletions drained")
        report = cluster.doctor()
        assert report["orphans"] == [] and report["missing"] == [], report
        client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
        try:
            consumer = client.subscribe(topic, "sub")
            rest = []
            while True:
                try:
                    rest.append(consumer.receive(3_000).data())
                except pulsar.Timeout:
                    break
            # Acks are stored at a bounded rate: a few acknowledged messages may come again.
            expected = [b"m-%d" % i for i in range(published)]
            assert rest == expected[len(expected) - len(rest) :]
            assert len(rest) >= published - acked
        finally:
            client.close()
    finally:
        cluster.stop()
