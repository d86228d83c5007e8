"""``make bench`` part: a Kafka node killed under load, the broker next to direct Kafka.

A 3-node Kafka (replication 3, two in sync, no unclean election: docs/deployment.md).
Twelve single-partition topics take 40 messages a second each, first from one idempotent
``acks=all`` librdkafka producer straight to Kafka (the best a Kafka client gets for the
same writes), then through one broker (PIP-6 deduplication on, ``kafkaReplicationFactor``
3) from the official Python client. Each cycle kills one node with SIGKILL (in turn 1, 2,
3, ...), waits until every topic is acknowledged again, starts the node again and lets
the cluster settle. Per topic and kill, the **pause** is the longest time without an
acknowledgement from the kill until every topic was back; reported as p50/p99/max, apart
for the topics whose partitions (ledger, fence, transaction coordinator, metadata) the
killed node led and the others.

    python -m bench.node_loss [--kills 10]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.results import record
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers.kafka_cluster import NativeKafkaCluster
from dedup_broker.storage.service.kafka_storage import internal_topic_partitions
from harness.node_loss import (
    BUNDLES,
    AckTimeline,
    Partition,
    current_ledger,
    dependencies,
    led_by,
    partition_leaders,
    replicated_broker,
)

TOPICS = 12
RATE_PER_TOPIC = 40
SETTLE_S = 8.0
PATIENCE_S = 90.0

Pauses = dict[str, list[float]]
"""Per group ("led" / "not led"), one pause per topic and kill."""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def kill_cycles(
    cluster: NativeKafkaCluster,
    kills: int,
    timeline: AckTimeline,
    topics: list[str],
    needs: Callable[[], dict[str, list[Partition]]],
) -> Pauses:
    """``kills`` node kills; each topic's pause, grouped by whether the node led its needs."""
    pauses: Pauses = {"led": [], "not led": []}
    for kill in range(kills):
        victim = kill % len(cluster.nodes) + 1
        wanted = needs()
        leaders = partition_leaders(cluster)
        killed_at = time.monotonic()
        cluster.kill_node(victim)
        deadline = killed_at + PATIENCE_S
        while time.monotonic() < deadline:
            if all(timeline.count(t, killed_at + 0.5, time.monotonic()) for t in topics):
                break
            time.sleep(0.1)
        back_at = time.monotonic()
        for topic in topics:
            group = "led" if led_by(leaders, wanted[topic], victim) else "not led"
            pauses[group].append(timeline.longest_silence(topic, killed_at, back_at))
        cluster.start_node(victim)
        time.sleep(SETTLE_S)
    return pauses


def direct_kafka(cluster: NativeKafkaCluster, kills: int) -> Pauses:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    prefix = f"direct-{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}-{i}" for i in range(TOPICS)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(t, 1, 3) for t in topics]).values():
        future.result()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
            # The broker's own setting: a reconnection to a restarted node is as quick.
            "reconnect.backoff.max.ms": BrokerConfig().kafka_reconnect_backoff_max_ms,
            "log_level": 3,
        }
    )
    timeline = AckTimeline()
    stop = threading.Event()

    def delivered(error: object, message: object) -> None:
        if error is None:
            timeline.acknowledged(message.topic())  # type: ignore[attr-defined]

    def publish() -> None:
        while not stop.is_set():
            for topic in topics:
                producer.produce(topic, b"x" * 100, on_delivery=delivered)
            producer.poll(0)
            time.sleep(1 / RATE_PER_TOPIC)

    def needs() -> dict[str, list[Partition]]:
        return {topic: [(topic, 0)] for topic in topics}

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    time.sleep(3)
    try:
        return kill_cycles(cluster, kills, timeline, topics, needs)
    finally:
        stop.set()
        thread.join()
        producer.flush(30)


def through_broker(cluster: NativeKafkaCluster, kills: int, folder: Path) -> Pauses:
    import pulsar

    cluster_name = f"bench-{uuid.uuid4().hex[:6]}"
    config = BrokerConfig(cluster_name=cluster_name, default_number_of_namespace_bundles=BUNDLES)
    broker = replicated_broker(cluster, cluster_name, folder)
    broker.start(timeout=120)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    topics = [f"persistent://public/default/{cluster_name}-{i}" for i in range(TOPICS)]
    timeline = AckTimeline()
    stop = threading.Event()
    fence_count = internal_topic_partitions(config)[f"{cluster_name}.fences"]
    try:
        producers = {
            topic: client.create_producer(
                topic, producer_name=f"p{i}", send_timeout_millis=0, batching_enabled=False
            )
            for i, topic in enumerate(topics)
        }

        def publish() -> None:
            while not stop.is_set():
                for topic, producer in producers.items():
                    producer.send_async(
                        b"x" * 100,
                        lambda result, _id, t=topic: (
                            timeline.acknowledged(t) if result == pulsar.Result.Ok else None
                        ),
                    )
                time.sleep(1 / RATE_PER_TOPIC)

        def needs() -> dict[str, list[Partition]]:
            return {
                topic: dependencies(
                    config, topic, current_ledger(broker.http_url, topic), fence_count
                )
                for topic in topics
            }

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        time.sleep(4)
        try:
            return kill_cycles(cluster, kills, timeline, topics, needs)
        finally:
            stop.set()
            thread.join()
            for producer in producers.values():
                producer.flush()
    finally:
        client.close()
        broker.stop()


def report(label: str, pauses: Pauses) -> None:
    for group, values in pauses.items():
        if not values:
            print(f"{label:<14} {group:<8} (no topic)")
            continue
        print(
            f"{label:<14} {group:<8} n={len(values):<4} p50 {statistics.median(values):5.2f} s"
            f"   p99 {percentile(values, 0.99):5.2f} s   max {max(values):5.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    with NativeKafkaCluster(nodes=3) as cluster:
        direct = direct_kafka(cluster, args.kills)
        folder = cluster.data_dir / "broker"
        folder.mkdir(exist_ok=True)
        broker = through_broker(cluster, args.kills, folder)
    print(f"\nKafka node kill -9, {args.kills} kills, {TOPICS} topics x {RATE_PER_TOPIC} msg/s")
    print("pause per topic and kill (longest time without an acknowledgement):")
    report("direct Kafka", direct)
    report("broker", broker)
    record("bench.node_loss", recorded(args.kills, {"direct Kafka": direct, "broker": broker}))


def recorded(kills: int, systems: dict[str, Pauses]) -> dict[str, Any]:
    """What ``bench.plots`` draws: per system and group, every pause (s, one per topic
    and kill)."""
    return {
        "kills": kills,
        "topics": TOPICS,
        "rate_per_topic": RATE_PER_TOPIC,
        "systems": systems,
    }


if __name__ == "__main__":
    main()
