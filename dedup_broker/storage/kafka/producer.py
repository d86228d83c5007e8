"""The broker's idempotent Kafka producers and the threads that serve their reports.

Every write of the storage layer (entries, ledger headers, metadata, cursors) goes
through these producers, so all of them are idempotent and ``acks=all``. A topic's
records always go through the same producer (``kafkaProducerPoolSize`` of them, chosen
by the topic's name), so they stay in order. Several producers rather than one because
librdkafka finds a record's topic by name in a list of every topic its producer has
written to, in the calling thread (the event loop): with 10,000 ledger topics on one
producer a record for a recently written one cost about 300 us (docs/storage.md, "Many
topics").

librdkafka never forgets a topic: a producer keeps the handle, partition state and
metadata (about 6 KB) of every topic it ever wrote to, deleted ones included, and its
cost per record grows with their number. Every ledger is a topic written for a while and
then never again (rollover, close), so a producer the broker kept for good would grow
without bound. The broker therefore tells the pool when it is done writing a topic
(:meth:`SharedProducer.forget`); once a producer has been told that of as many topics
as it still writes to (and of at least ``RENEW_AFTER_FORGOTTEN``), it is **renewed**: a
fresh producer takes the topics from then on, except a topic with records still in the
old one, which stays there until they are settled (so each topic's records stay in
order), and the old one is closed once it holds nothing.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Sequence

from confluent_kafka import KafkaError

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.storage.kafka.common import storage_error
from dedup_broker.storage.kafka.polled_producer import (
    DeliveryHandler,
    Headers,
    PolledProducer,
    Record,
)

log = logging.getLogger(__name__)

RENEW_AFTER_FORGOTTEN = 200
"""Fewest topics a producer must have been told it writes no more before it is renewed:
a renewal costs a fresh producer its connections and every topic's metadata again."""


class _FutureDelivery:
    """Resolves an asyncio future with the record's offset."""

    __slots__ = ("future", "what")

    def __init__(self, future: asyncio.Future[int], what: str) -> None:
        self.future = future
        self.what = what

    def on_delivery(self, error: KafkaError | None, offset: int) -> None:
        if self.future.done():
            return
        if error is None:
            self.future.set_result(offset)
        else:
            self.future.set_exception(storage_error(self.what, error))


class SharedProducer:
    """The producers, each topic's records through one of them."""

    __slots__ = ("_loop", "_shards")

    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        count = max(1, config.kafka_producer_pool_size)
        self._shards = [_Shard(config, loop, i) for i in range(count)]

    def _shard(self, topic: str) -> _Shard:
        shards = self._shards
        return shards[zlib.crc32(topic.encode()) % len(shards)] if len(shards) > 1 else shards[0]

    def produce(
        self,
        topic: str,
        value: bytes | None,
        handler: DeliveryHandler,
        *,
        key: bytes | None = None,
        partition: int = -1,
        timestamp_ms: int = 0,
        headers: Sequence[tuple[str, bytes]] | None = None,
        single_partition: bool = False,
    ) -> None:
        """Queue one record; ``handler.on_delivery`` runs on the loop when it is settled.

        ``single_partition``: the topic has one partition (a ledger), so its records are
        handed to librdkafka in step with their acknowledgements (module docstring).
        Raises StorageError if the record could not even be queued.
        """
        wire_headers: Headers | None = list(headers) if headers else None
        record = Record(
            value, handler, key, partition, timestamp_ms, wire_headers, single_partition
        )
        self._shard(topic).produce(topic, record)

    def forget(self, topic: str) -> None:
        """Nothing more will be written to ``topic`` (a ledger closed): the producer that
        wrote it may be renewed to drop what librdkafka keeps of it. Writing to it again
        later is allowed, just not cheap."""
        self._shard(topic).forget(topic)

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int = -1,
        timestamp_ms: int = 0,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[int]:
        """Queue one record; the future gives its offset once Kafka acknowledged it."""
        future: asyncio.Future[int] = self._loop.create_future()
        self.produce(
            topic,
            value,
            _FutureDelivery(future, f"write to {topic}"),
            key=key,
            partition=partition,
            timestamp_ms=timestamp_ms,
            headers=headers,
        )
        return future

    async def close(self, timeout_seconds: float | None = None) -> None:
        """Wait for queued records (bounded by the delivery timeout, or ``timeout_seconds``
        if shorter) and stop the threads; what is still queued then is purged."""
        await asyncio.gather(*(shard.close(timeout_seconds) for shard in self._shards))


class _Shard:
    """The producer a share of the topics is written through and, after a renewal, the
    one it replaced until that one's records are settled."""

    __slots__ = (
        "_config",
        "_forgotten",
        "_held",
        "_index",
        "_known",
        "_loop",
        "current",
        "retiring",
    )

    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop, index: int) -> None:
        self._config = config
        self._loop = loop
        self._index = index
        self.current = PolledProducer(config, loop, index, self._settled)
        self.retiring: PolledProducer | None = None
        self._held: dict[str, list[Record]] = {}
        """Per topic, records that wait for the retiring producer to settle the topic."""
        self._known: set[str] = set()
        """Topics the current producer wrote to and was not told it is done with."""
        self._forgotten = 0

    def produce(self, topic: str, record: Record) -> None:
        retiring = self.retiring
        if retiring is not None and topic in retiring.pending:
            self._held.setdefault(topic, []).append(record)
            return
        self._known.add(topic)
        self.current.produce(topic, record)

    def _settled(self, polled: PolledProducer, topic: str) -> None:
        """``polled`` holds no more records of ``topic``: held ones go to the current."""
        if polled is not self.retiring or topic not in self._held:
            return
        self._known.add(topic)
        for record in self._held.pop(topic):
            try:
                self.current.produce(topic, record)
            except StorageError as exc:
                record.handler.on_delivery(KafkaError(KafkaError._FAIL, str(exc)), -1)

    def forget(self, topic: str) -> None:
        if topic not in self._known:
            return
        self._known.discard(topic)
        self._forgotten += 1
        renewable = self.retiring is None or self.retiring.closed
        if renewable and self._forgotten >= max(RENEW_AFTER_FORGOTTEN, len(self._known)):
            self._renew()

    def _renew(self) -> None:
        log.info(
            "renewing Kafka producer %d: done with %d topics, writing %d",
            self._index,
            self._forgotten,
            len(self._known),
        )
        old = self.current
        self.current = PolledProducer(self._config, self._loop, self._index, self._settled)
        self._known = set()
        self._forgotten = 0
        self.retiring = old
        old.retire()

    async def close(self, timeout_seconds: float | None = None) -> None:
        retiring = self.retiring
        if retiring is not None:
            await retiring.close(timeout_seconds)
        await self.current.close(timeout_seconds)
        held, self._held = self._held, {}
        for records in held.values():
            for record in records:
                record.handler.on_delivery(KafkaError(KafkaError._DESTROY), -1)
