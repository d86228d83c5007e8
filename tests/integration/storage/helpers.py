"""Helpers for storage tests on the real Kafka."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from dedup_broker.config import BrokerConfig
from dedup_broker.storage import formats


class ConfigFactory(Protocol):
    def __call__(self, **overrides: Any) -> BrokerConfig: ...


def run(scenario: Callable[[], Awaitable[None]], timeout: float = 90) -> None:
    """Run an async test body with a hard time limit."""
    asyncio.run(asyncio.wait_for(scenario(), timeout))


def read_topic(bootstrap: str, topic: str, timeout: float = 10) -> list[Message]:
    """Every record of partition 0 of ``topic``, read with a plain consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[Message] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return records
                raise AssertionError(str(error))
            records.append(msg)
        raise AssertionError(f"reading {topic} timed out")
    finally:
        consumer.close()


async def wait_until(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def land_records(kafka_bootstrap: str, topic: str, records: list[tuple[bytes, int, int]]) -> None:
    """Records written as this broker writes them (key: size so far, entry id), but not
    by it: as the records of writes whose reports failed would land."""
    outsider = Producer({"bootstrap.servers": kafka_bootstrap})
    for value, size, entry_id in records:
        outsider.produce(topic, value, formats.encode_entry_key(size, entry_id))
    assert outsider.flush(10) == 0
