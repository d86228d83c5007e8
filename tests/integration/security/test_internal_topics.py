"""The broker's own Kafka topics are not Pulsar topics: a client that names them publishes
into a Pulsar topic of its own, never into them (no forged deletion intent)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.conftest import make_broker


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        ends: dict[str, int] = {}
        for topic in topics:
            partitions = metadata.topics[topic].partitions
            ends[topic] = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions
            )
        return ends
    finally:
        consumer.close()


def test_names_of_internal_topics_reach_pulsar_topics_only(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    broker = make_broker(kafka_bootstrap, tmp_path)
    broker.start()
    cluster = broker.cluster_name
    internal = [
        f"{cluster}.__ledger_deletion",
        f"{cluster}.__ledger_deletion-RETRY",
        f"{cluster}.__ledger_deletion-DLQ",
    ]
    try:
        before = end_offsets(kafka_bootstrap, internal)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            forged = b'{"ledgerId": 1, "topicName": "public/default/persistent/victim"}'
            names = [*internal, "__ledger_deletion", f"{cluster}.policies"]
            for name in names:
                topic = f"persistent://public/default/{name}"
                reader = client.create_reader(topic, pulsar.MessageId.earliest)
                client.create_producer(topic).send(forged)
                # The message is a Pulsar message of that Pulsar topic, read back as such...
                assert reader.read_next(10_000).data() == forged
        finally:
            client.close()
        # ...and nothing reached the broker's own topics.
        assert end_offsets(kafka_bootstrap, internal) == before
    finally:
        broker.stop()
