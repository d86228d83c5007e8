"""The Kafka the tests get behaves as the storage layer assumes: compaction configs stick,
keyed records come back in the order they were written, with their offsets."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

Record = tuple[bytes | None, bytes | None, int | None]
"""(key, value, offset) of one consumed record."""

COMPACTION_CONFIGS = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "segment.ms": "60000",
}


@pytest.fixture
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def compacted_topic(admin: AdminClient, unique_name: Callable[[str], str]) -> Iterator[str]:
    topic = unique_name("basics-compacted")
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config=COMPACTION_CONFIGS)],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[topic].result(timeout=60)
    # The controller has created it; the broker answering the next request may learn of
    # it a moment later (describe_configs then fails UNKNOWN_TOPIC_OR_PART).
    deadline = time.monotonic() + 30
    while admin.list_topics(topic, timeout=10).topics[topic].error is not None:
        assert time.monotonic() < deadline, f"topic {topic} not known to the broker"
        time.sleep(0.1)
    yield topic
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)


def test_compaction_configs_are_set_on_the_topic(admin: AdminClient, compacted_topic: str) -> None:
    resource = ConfigResource(ResourceType.TOPIC, compacted_topic)
    described = admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=60)
    actual = {name: described[name].value for name in COMPACTION_CONFIGS}
    assert actual == COMPACTION_CONFIGS
    for name in COMPACTION_CONFIGS:
        assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_keyed_records_come_back_in_write_order(kafka_bootstrap: str, compacted_topic: str) -> None:
    sent = [(f"key-{n % 3}".encode(), f"value-{n}".encode()) for n in range(12)]
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True}
    )
    delivered: list[Record] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        delivered.append((msg.key(), msg.value(), msg.offset()))

    for key, value in sent:
        producer.produce(compacted_topic, key=key, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert delivered == [(key, value, offset) for offset, (key, value) in enumerate(sent)]

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{compacted_topic}-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(compacted_topic, 0, 0)])
        received: list[Record] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and len(received) == len(sent):
                    break
                assert error.code() == KafkaError._PARTITION_EOF, error
                continue
            received.append((msg.key(), msg.value(), msg.offset()))
    finally:
        consumer.close()
    assert received == delivered
