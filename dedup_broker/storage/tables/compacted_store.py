"""Companion topics of compacted topics: the latest message of each key, kept by Kafka.

A compacted topic's companion is a Kafka topic with ``cleanup.policy=compact``, keyed by
the message key, so Kafka's own log compaction keeps it near one record per key (a
tombstone removes a key). Its name is chosen once per managed ledger and stored in the
managed ledger's properties (``COMPACTED_TOPIC_PROPERTY``) before the topic is created,
so deleting the managed ledger always finds it, and a crash never leaves one that
nothing names.
"""

from __future__ import annotations

import asyncio
import secrets

from dedup_broker.config import BrokerConfig
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.values import FetchedRecord

_FETCH_BYTES = 8 * 1024 * 1024


def compacted_topic_prefix(cluster_name: str) -> str:
    return f"{cluster_name}.compacted."


class CompactedTopicStore:
    def __init__(
        self,
        config: BrokerConfig,
        admin: KafkaAdmin,
        producer: SharedProducer,
        reader: KafkaReader,
    ) -> None:
        self._prefix = compacted_topic_prefix(config.cluster_name)
        self._admin = admin
        self._producer = producer
        self._reader = reader
        self._topic_config = {
            "cleanup.policy": "compact",
            "retention.ms": "-1",
            # Small segments so that Kafka's cleaner gets to them (it skips the active one).
            "segment.ms": "3600000",
            "min.cleanable.dirty.ratio": "0.2",
        }

    def new_topic_name(self) -> str:
        return self._prefix + secrets.token_hex(8)

    def is_companion(self, topic: str) -> bool:
        return topic.startswith(self._prefix)

    async def ensure(self, topic: str) -> None:
        """Create ``topic`` if it does not exist yet (a rerun after a crash finds it)."""
        await self._admin.create_topic(topic, self._topic_config)

    async def write(self, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Store ``(key, value)`` records (None: a tombstone); returns once Kafka has all."""
        futures = [self._producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)

    async def read_all(self, topic: str) -> list[FetchedRecord]:
        """Every record Kafka still holds, in offset order."""
        end = await self._admin.high_watermark(topic)
        found: list[FetchedRecord] = []
        start = 0
        while start < end:
            records = await self._reader.fetch(topic, start, end, max_bytes=_FETCH_BYTES)
            if not records:
                break
            found.extend(records)
            start = records[-1].offset + 1
        return found

    async def delete(self, topic: str) -> None:
        await self._admin.delete_topics([topic])
