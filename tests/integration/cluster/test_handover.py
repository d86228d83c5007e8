"""Planned handover: brokers join and leave while producers and consumers run.

PIP-6 producers (fixed names, ``send_timeout_millis=0``) publish steadily to topics
spread over the brokers; a fourth broker joins, then one leaves with SIGTERM, then a topic
is unloaded. The applications see no error; every message is stored once, in order.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pulsar

from harness.cluster_processes import ClusterProcesses
from tests.integration.cluster.conftest import SteadyProducer, owner_of, read_all

TOPICS = 8
PER_SECOND = 40.0
TOTAL = 800


def test_brokers_join_and_leave_while_clients_run(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = {
        "broker_deduplication_enabled": True,
        # Keep consumed ledgers, so that a reader can check everything stored.
        "default_retention_time_in_minutes": -1,
        "default_retention_size_in_mb": -1,
    }
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=3, settings=settings)
    try:
        cluster.start()
        topics = [f"persistent://public/default/ho-{uuid.uuid4().hex[:8]}" for _ in range(TOPICS)]
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        received: dict[str, list[int]] = {t: [] for t in topics}
        errors: list[BaseException] = []
        consumers = [client.subscribe(t, "handover") for t in topics]

        def consume(consumer: pulsar.Consumer, topic: str) -> None:
            try:
                while len(set(received[topic])) < TOTAL:
                    msg = consumer.receive(timeout_millis=60_000)
                    received[topic].append(int(msg.data()))
                    consumer.acknowledge(msg)
            except BaseException as exc:
                errors.append(exc)

        readers = [
            threading.Thread(target=consume, args=(c, t), daemon=True)
            for c, t in zip(consumers, topics, strict=True)
        ]
        for thread in readers:
            thread.start()
        producers = [
            SteadyProducer(client, t, f"ho-{i}", TOTAL, PER_SECOND).start()
            for i, t in enumerate(topics)
        ]
        pauses: dict[str, float] = {}

        time.sleep(3)
        started = time.monotonic()
        joining = cluster.add()
        joining.start()
        cluster.wait_settled()
        time.sleep(2)
        pauses["join"] = max(p.log.largest_gap(started, time.monotonic()) for p in producers)

        started = time.monotonic()
        leaving = cluster[0]
        code, _ = leaving.terminate(timeout=60)
        assert code == 0
        cluster.wait_settled()
        time.sleep(2)
        pauses["leave"] = max(p.log.largest_gap(started, time.monotonic()) for p in producers)

        started = time.monotonic()
        target = topics[0]
        owner = owner_of(cluster, target)
        local = target.rsplit("/", 1)[-1]
        request = urllib.request.Request(
            f"{owner.http_url}/admin/v2/persistent/public/default/{local}/unload", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204
        time.sleep(2)
        pauses["unload"] = producers[0].log.largest_gap(started, time.monotonic())

        for producer in producers:
            producer.wait(timeout=120)
        for thread in readers:
            thread.join(timeout=120)
        print(f"longest pause between acknowledgements: {pauses}")

        assert not errors, errors[:3]
        for producer in producers:
            assert producer.log.errors == [], producer.log.errors[:3]
            assert sorted(i for i, _ in producer.log.acked) == list(range(TOTAL))
        for topic in topics:
            assert read_all(client, topic) == [str(i).encode() for i in range(TOTAL)]
            first_seen = list(dict.fromkeys(received[topic]))
            assert first_seen == list(range(TOTAL)), f"{topic}: out of order or missing"
        client.close()
    finally:
        cluster.stop()
