"""Broker killed with SIGKILL at random points while ledgers are offloaded (threshold 0,
Kafka copies deleted at once): afterwards no orphan in Kafka or in tiered storage, no
listed copy missing, every message readable in order."""

from __future__ import annotations

import random
import threading
import uuid
from pathlib import Path

import pulsar
import pytest

from tests.integration.system_topics.deletion_helpers import Cluster, wait_until

pytestmark = pytest.mark.chaos

CYCLES = 3
PER_CYCLE = 100


def test_kills_during_offloads_leave_no_orphans_and_lose_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    rng = random.Random(11)
    cluster = Cluster(
        kafka_bootstrap,
        tmp_path,
        managed_ledger_offload_driver="filesystem",
        file_system_uri=str(tmp_path / "tiered"),
        managed_ledger_offload_deletion_lag_ms=0,
        two_phase_deletion_max_retry_delete_count=50,
        broker_deduplication_enabled=True,
    )
    cluster.broker.start()
    cluster.add_worker()
    cluster.admin_json("PUT", "/admin/v2/namespaces/public/default/offloadThreshold", b"0")
    topic = f"persistent://public/default/chaos-off-{uuid.uuid4().hex[:8]}"
    published = 0
    try:
        for _ in range(CYCLES):
            client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
            try:
                client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
                producer = client.create_producer(
                    topic, producer_name=f"p-{published}", batching_enabled=False
                )
                # Killed (and restarted) while publishing: rollovers start offloads.
                killer = threading.Timer(rng.uniform(0.1, 0.6), cluster.broker.restart)
                killer.start()
                for _ in range(PER_CYCLE):
                    producer.send(b"m-%d" % published)  # deduplicated when resent
                    published += 1
                killer.join(90)
            finally:
                client.close()
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/internalStats"

        def settled() -> bool:
            ledgers = cluster.admin_json("GET", path)["ledgers"]
            closed = [x for x in ledgers[:-1] if x["entries"] > 0]
            return all(x["offloaded"] for x in closed) and cluster.in_flight() == 0

        wait_until(settled, 120, "every closed ledger offloaded, deletions drained")
        report = cluster.doctor()
        problems = {
            k: report[k] for k in ("orphans", "missing", "offloadOrphans", "offloadMissing")
        }
        assert report["ok"], problems
        client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            seen = []
            while reader.has_message_available():
                seen.append(reader.read_next(10_000).data())
            expected = [b"m-%d" % i for i in range(published)]
            missing = sorted(set(expected) - set(seen))
            repeated = sorted({m for m in seen if seen.count(m) > 1})
            assert seen == expected, f"missing {missing[:20]}, repeated {repeated[:20]}"
        finally:
            client.close()
    finally:
        cluster.stop()
