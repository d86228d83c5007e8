"""A new ledger's header is written again while Kafka does not know the new topic yet."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, UnknownTopicError
from dedup_broker.storage import formats
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.common import storage_error
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.ledger.ledger_store import LedgerStore


class _Producer:
    """Allocates ids on the ids topic; refuses the first ``refusals`` header writes."""

    def __init__(self, refusals: int, refusal: StorageError) -> None:
        self.refusals = refusals
        self.refusal = refusal
        self.ids = 0
        self.headers: list[str] = []

    def send(self, topic: str, value: bytes | None, **_: Any) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if topic.endswith(".ledger-ids"):
            future.set_result(self.ids)
            self.ids += 1
        elif self.refusals > 0:
            self.refusals -= 1
            future.set_exception(self.refusal)
        else:
            self.headers.append(topic)
            future.set_result(0)
        return future


class _Admin:
    async def create_topic(self, topic: str, config: Any, partitions: int = 1) -> bool:
        return True


def _store(producer: _Producer) -> LedgerStore:
    config = BrokerConfig(cluster_name="unit")
    return LedgerStore(
        config,
        "broker-1",
        cast(SharedProducer, producer),
        cast(KafkaAdmin, _Admin()),
        cast(KafkaReader, object()),
    )


def test_unknown_topic_errors_are_told_apart() -> None:
    unknown = storage_error("write", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert isinstance(unknown, UnknownTopicError)
    other = storage_error("write", KafkaError(KafkaError._MSG_TIMED_OUT))
    assert isinstance(other, StorageError) and not isinstance(other, UnknownTopicError)


def test_the_header_is_written_again_until_kafka_knows_the_topic() -> None:
    producer = _Producer(2, storage_error("write", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
    ledger_id = asyncio.run(_store(producer).create("public/default/persistent/t"))
    assert producer.headers == [formats.ledger_topic("unit", ledger_id)]


def test_other_header_failures_are_not_retried() -> None:
    producer = _Producer(1, storage_error("write", KafkaError(KafkaError._MSG_TIMED_OUT)))
    with pytest.raises(StorageError, match="_MSG_TIMED_OUT"):
        asyncio.run(_store(producer).create("public/default/persistent/t"))
    assert producer.headers == []
