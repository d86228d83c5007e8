"""Failover chaos: a random broker of three is killed with kill -9 and restarted, cycle
after cycle, while PIP-6 producers (fixed names, ``send_timeout_millis=0``) and durable
consumers run on topics spread over the cluster.

Every id is stored exactly once and in order; consumers see every id, first in order;
everything they acknowledged stays acknowledged. ``CLUSTER_CHAOS_CYCLES`` sets the
number of cycles (``make soak`` runs many more).
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from harness.cluster_processes import ClusterProcesses
from tests.integration.cluster.conftest import SteadyProducer, owner_of, read_all

pytestmark = pytest.mark.chaos

CYCLES = int(os.environ.get("CLUSTER_CHAOS_CYCLES", "4"))
TOPICS = 6
PER_SECOND = 25.0
DRAIN_MS = 15_000
"""Quiet time after which a consumer has had every redelivery (failovers take < 10 s)."""


class AckingConsumer:
    """Receives and acknowledges from a thread; remembers what it received."""

    def __init__(self, client: pulsar.Client, topic: str, total: int) -> None:
        self.consumer = client.subscribe(
            topic, "chaos", initial_position=pulsar.InitialPosition.Earliest
        )
        self.total = total
        self.received: list[int] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        seen: set[int] = set()
        try:
            while len(seen) < self.total:
                msg = self.consumer.receive(timeout_millis=300_000)
                value = int(msg.data())
                self.received.append(value)
                seen.add(value)
                self.consumer.acknowledge(msg)
            # Acks in flight when a broker was killed are lost: those messages come again
            # (at least once) and are acknowledged again, until nothing more comes for
            # longer than a failover takes (the last kill's may still be under way).
            while True:
                try:
                    msg = self.consumer.receive(timeout_millis=DRAIN_MS)
                except pulsar.Timeout:
                    return
                self.received.append(int(msg.data()))
                self.consumer.acknowledge(msg)
        except BaseException as exc:
            self.errors.append(exc)


def first_ack_after(producer: SteadyProducer, moment: float) -> float:
    with producer.log.lock:
        return min((t for _, t in producer.log.acked if t > moment), default=float("inf"))


def test_kill_random_brokers_while_clients_run(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = {
        "broker_deduplication_enabled": True,
        "default_retention_time_in_minutes": -1,
        "default_retention_size_in_mb": -1,
    }
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=3, settings=settings)
    rng = random.Random(20261124)
    # Long enough to outlast every cycle (about 3 s each) plus a margin.
    total = int(PER_SECOND * (CYCLES * 3 + 20))
    try:
        cluster.start()
        topics = [f"persistent://public/default/ch-{uuid.uuid4().hex[:8]}" for _ in range(TOPICS)]
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=120)
        consumers = [AckingConsumer(client, t, total) for t in topics]
        producers = [
            SteadyProducer(client, t, f"chaos-{i}", total, PER_SECOND).start()
            for i, t in enumerate(topics)
        ]
        kills: list[tuple[float, list[SteadyProducer]]] = []
        for _ in range(CYCLES):
            time.sleep(rng.uniform(0.5, 1.5))
            victim = rng.choice(cluster.running())
            owned = [owner_of(cluster, t) is victim for t in topics]
            hit = [p for p, mine in zip(producers, owned, strict=True) if mine]
            kills.append((time.monotonic(), hit))
            victim.kill()
            victim.start()
        for producer in producers:
            producer.wait(timeout=300)
        for consumer in consumers:
            consumer.thread.join(timeout=300)
        failovers = [
            max(first_ack_after(p, killed_at) - killed_at for p in hit)
            for killed_at, hit in kills
            if hit
        ]
        if failovers:
            print(
                f"{CYCLES} kills; failover (kill -> its topics' producers acknowledged again): "
                f"median {statistics.median(failovers):.1f}s, max {max(failovers):.1f}s"
            )

        for producer in producers:
            assert producer.log.errors == [], producer.log.errors[:3]
            assert sorted(i for i, _ in producer.log.acked) == list(range(total))
        for topic in topics:
            assert read_all(client, topic) == [str(i).encode() for i in range(total)], topic
        for consumer in consumers:
            assert consumer.errors == [], consumer.errors[:3]
            assert list(dict.fromkeys(consumer.received)) == list(range(total))
            consumer.consumer.close()
        # Everything acknowledged stays acknowledged: the subscription has nothing left.
        for topic in topics:
            again = client.subscribe(topic, "chaos")
            with pytest.raises(pulsar.Timeout):
                again.receive(timeout_millis=2000)
            again.close()
        client.close()
    finally:
        cluster.stop()
