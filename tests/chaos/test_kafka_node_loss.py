"""A Kafka node killed under load: every topic is acknowledged again once Kafka elected
new leaders, nothing acknowledged is lost, repeated or reordered, and no slot is lost.

Kafka is a 3-node cluster set up as production clusters are (replication 3, two in
sync, no unclean election). The metadata tables are placed on node 1 as an operator
would place them; the node killed (2 or 3) is the one leading the most of the topics'
ledgers, fence partitions and transaction coordinators. How long each topic waited is
printed here and measured against direct Kafka by ``bench.node_loss``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from dedup_broker.config import BrokerConfig
from dedup_broker.devservers.kafka_cluster import NativeKafkaCluster
from dedup_broker.storage.service.kafka_storage import internal_topic_partitions, internal_topics
from harness.node_loss import (
    BUNDLES,
    AckTimeline,
    current_ledger,
    dependencies,
    led_by,
    partition_leaders,
    replicated_broker,
)

TOPICS = 12
RATE_PER_TOPIC = 40
RESUME_PATIENCE_S = 60.0


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[NativeKafkaCluster]:
    with NativeKafkaCluster(nodes=3, startup_timeout=180) as cluster:
        yield cluster


def place_internal_topics(cluster: NativeKafkaCluster, config: BrokerConfig) -> None:
    """The broker's internal topics created before it starts: metadata led by node 1,
    the fence partitions spread over the three nodes."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    partitions = internal_topic_partitions(config)
    new = []
    for topic, settings in internal_topics(config).items():
        count = partitions.get(topic, 1)
        if count == 1:
            assignment = [[1, 2, 3]]
        else:
            assignment = [[i % 3 + 1, (i + 1) % 3 + 1, (i + 2) % 3 + 1] for i in range(count)]
        new.append(NewTopic(topic, count, replica_assignment=assignment, config=settings))
    for future in admin.create_topics(new).values():
        future.result()


def test_a_node_killed_stalls_only_the_topics_it_led(
    kafka_cluster: NativeKafkaCluster, tmp_path: Path
) -> None:
    cluster_name = f"nodeloss-{uuid.uuid4().hex[:8]}"
    config = BrokerConfig(cluster_name=cluster_name, default_number_of_namespace_bundles=BUNDLES)
    place_internal_topics(kafka_cluster, config)
    broker = replicated_broker(kafka_cluster, cluster_name, tmp_path)
    broker.start(timeout=120)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    topics = [f"persistent://public/default/node-loss-{i}" for i in range(TOPICS)]
    timeline = AckTimeline()
    acknowledged: dict[str, list[str]] = {topic: [] for topic in topics}
    errors: list[str] = []
    stop = threading.Event()
    try:
        producers = {
            topic: client.create_producer(topic, producer_name=f"p{i}", send_timeout_millis=120_000)
            for i, topic in enumerate(topics)
        }

        def on_sent(topic: str, value: str) -> pulsar.SendCallback:
            def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    acknowledged[topic].append(value)
                    timeline.acknowledged(topic)
                else:
                    errors.append(f"{topic} {value}: {result}")

            return sent

        def publish() -> None:
            sequence = 0
            while not stop.is_set():
                for topic, producer in producers.items():
                    value = f"{sequence}"
                    producer.send_async(value.encode(), on_sent(topic, value))
                sequence += 1
                time.sleep(1 / RATE_PER_TOPIC)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        time.sleep(4)

        ledgers = {topic: current_ledger(broker.http_url, topic) for topic in topics}
        fence_count = internal_topic_partitions(config)[f"{cluster_name}.fences"]
        needs = {
            topic: dependencies(config, topic, ledgers[topic], fence_count) for topic in topics
        }
        leaders = partition_leaders(kafka_cluster)
        victim = max((2, 3), key=lambda node: sum(led_by(leaders, needs[t], node) for t in topics))
        affected = [t for t in topics if led_by(leaders, needs[t], victim)]
        assert affected, f"node {victim} leads nothing of {topics}"

        killed_at = time.monotonic()
        kafka_cluster.kill_node(victim)
        deadline = killed_at + RESUME_PATIENCE_S
        while time.monotonic() < deadline:
            if all(timeline.count(t, killed_at + 1, time.monotonic()) for t in topics):
                break
            time.sleep(0.2)
        resumed_at = time.monotonic()
        kafka_cluster.start_node(victim)
        time.sleep(3)
        stop.set()
        publisher.join()
        for producer in producers.values():
            producer.flush()

        assert not errors, errors[:5]
        waiting = [t for t in topics if not timeline.count(t, killed_at + 1, resumed_at)]
        assert not waiting, f"not acknowledged since node {victim} was killed: {waiting}"
        pauses = {t: round(timeline.longest_silence(t, killed_at, resumed_at), 2) for t in topics}
        print(f"node {victim} killed; pauses (led by it: {len(affected)}): {pauses}")
        assert "write fence failed" not in broker.log_text()

        for topic in topics:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            stored: list[str] = []
            while reader.has_message_available():
                stored.append(reader.read_next(timeout_millis=20_000).data().decode())
            reader.close()
            assert stored == acknowledged[topic], topic
    finally:
        stop.set()
        client.close()
        broker.stop()
