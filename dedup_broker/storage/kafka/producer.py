"""The broker's idempotent Kafka producers and the threads that serve their reports.

Every write of the storage layer (entries, ledger headers, metadata, cursors) goes
through these producers, so all of them are idempotent and ``acks=all``. A topic's
records always go through the same producer (``kafkaProducerPoolSize`` of them, chosen
by the topic's name), so they stay in order. Several producers rather than one because
librdkafka finds a record's topic by name in a list of every topic its producer has
written to, in the calling thread (the event loop): with 10,000 ledger topics on one
producer a record for a recently written one cost about 300 us (docs/storage.md, "Many
topics").

librdkafka calls delivery callbacks from ``poll()``; a dedicated thread per producer
polls, collects the reports of one poll in a list and hands the whole list to the event
loop with a single ``call_soon_threadsafe``: at thousands of appends per second that is
one thread hop per batch, not per record.

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

If librdkafka reports a fatal error (the idempotent producer can no longer guarantee
ordering), that producer is replaced by a fresh one; everything still queued in the old
one fails, which the managed ledgers treat like any other failed write.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, UnknownTopicError
from dedup_broker.kafka_logging import kafka_logger

log = logging.getLogger(__name__)

MAX_RECORD_OVERHEAD = 1024 * 1024
"""Room above ``maxMessageSize`` for record and batch framing."""

_POLL_INTERVAL_S = 0.05
_Headers = list[tuple[str, str | bytes | None]]
RENEW_AFTER_FORGOTTEN = 200
"""Fewest topics a producer must have been told it writes no more before it is renewed:
a renewal costs a fresh producer its connections and every topic's metadata again."""


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return getattr(libc, "malloc_trim", None)


_MALLOC_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Give what the C heap freed back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). A destroyed librdkafka client frees thousands of small blocks, which glibc
    otherwise keeps: renewing producers lowered the broker's RSS only with this."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class DeliveryHandler(Protocol):
    def on_delivery(self, error: KafkaError | None, offset: int) -> None:
        """Called on the event loop once Kafka acknowledged (or failed) the record."""


def max_record_bytes(config: BrokerConfig) -> int:
    return config.max_message_size + MAX_RECORD_OVERHEAD


_UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


def storage_error(what: str, error: KafkaError | BaseException) -> StorageError:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        unknown = error.code() in _UNKNOWN_TOPIC_CODES
        kind = UnknownTopicError if unknown else StorageError
        return kind(f"{what}: {error.str()} ({error.name()})")
    return StorageError(f"{what}: {error}")


def _offset(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else offset


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
    ) -> None:
        """Queue one record; ``handler.on_delivery`` runs on the loop when it is settled.

        Raises StorageError if the record could not even be queued.
        """
        wire_headers: _Headers | None = list(headers) if headers else None
        self._shard(topic).produce(
            topic, value, handler, key, partition, timestamp_ms, wire_headers
        )

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


class _HeldRecord(NamedTuple):
    """A record waiting for the retiring producer to settle its topic's earlier ones
    (the arguments of :meth:`_PolledProducer.produce` after the topic)."""

    value: bytes | None
    handler: DeliveryHandler
    key: bytes | None
    partition: int
    timestamp_ms: int
    headers: _Headers | None


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
        self.current = _PolledProducer(config, loop, index, self._settled)
        self.retiring: _PolledProducer | None = None
        self._held: dict[str, list[_HeldRecord]] = {}
        """Per topic, records that wait for the retiring producer to settle the topic."""
        self._known: set[str] = set()
        """Topics the current producer wrote to and was not told it is done with."""
        self._forgotten = 0

    def produce(
        self,
        topic: str,
        value: bytes | None,
        handler: DeliveryHandler,
        key: bytes | None,
        partition: int,
        timestamp_ms: int,
        headers: _Headers | None,
    ) -> None:
        retiring = self.retiring
        if retiring is not None and topic in retiring.pending:
            record = _HeldRecord(value, handler, key, partition, timestamp_ms, headers)
            self._held.setdefault(topic, []).append(record)
            return
        self._known.add(topic)
        self.current.produce(topic, value, handler, key, partition, timestamp_ms, headers)

    def _settled(self, polled: _PolledProducer, topic: str) -> None:
        """``polled`` holds no more records of ``topic``: held ones go to the current."""
        if polled is not self.retiring or topic not in self._held:
            return
        self._known.add(topic)
        for record in self._held.pop(topic):
            try:
                self.current.produce(topic, *record)
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
        self.current = _PolledProducer(self._config, self._loop, self._index, self._settled)
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


class _PolledProducer:
    """One librdkafka producer and the thread that polls it."""

    def __init__(
        self,
        config: BrokerConfig,
        loop: asyncio.AbstractEventLoop,
        index: int,
        settled: Callable[[_PolledProducer, str], None],
    ) -> None:
        self._loop = loop
        self._settled = settled
        """Told on the loop when no record of a topic is left unreported."""
        self._flush_timeout_s = config.kafka_delivery_timeout_ms / 1000 + 5
        record_bytes = max_record_bytes(config)
        self._conf: dict[str, Any] = {
            **config.kafka_connection(),
            "client.id": f"{config.cluster_name}.broker" + (f"-{index}" if index else ""),
            "logger": kafka_logger(),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": config.kafka_producer_linger_ms,
            "delivery.timeout.ms": config.kafka_delivery_timeout_ms,
            "request.timeout.ms": config.kafka_request_timeout_ms,
            "message.max.bytes": record_bytes,
            "batch.size": record_bytes,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2 * 1024 * 1024,
            # A record for a deleted ledger must fail, never recreate the topic.
            "allow.auto.create.topics": False,
            "error_cb": self._on_error,
        }
        self.producer = Producer(self._conf)
        self.reports: list[tuple[DeliveryHandler, str, KafkaError | None, int]] = []
        self.pending: dict[str, int] = {}
        """Records queued and not yet reported to the loop, per topic."""
        self._retired = False
        self._retirement: asyncio.Task[None] | None = None
        self._fatal = False
        self.stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"kafka-producer-poll-{index}", daemon=True
        )
        self._thread.start()

    # --- event loop side ------------------------------------------------------------
    def _dispatch(self, batch: list[tuple[DeliveryHandler, str, KafkaError | None, int]]) -> None:
        pending = self.pending
        for handler, topic, error, offset in batch:
            try:
                handler.on_delivery(error, offset)
            except Exception:
                log.exception("delivery handler %r failed", handler)
            left = pending[topic] - 1
            if left:
                pending[topic] = left
            else:
                del pending[topic]
                if self._retired:
                    self._settled(self, topic)
        if self._retired and not pending:
            self._close_when_retired()

    def produce(
        self,
        topic: str,
        value: bytes | None,
        handler: DeliveryHandler,
        key: bytes | None,
        partition: int,
        timestamp_ms: int,
        headers: _Headers | None,
    ) -> None:
        if self.stopping.is_set():
            raise StorageError("the Kafka producer is closed")
        try:
            self.producer.produce(
                topic,
                value,
                key,
                partition,
                # ``self.reports`` looked up when the report comes: the poll thread hands
                # the list over and starts a new one.
                on_delivery=lambda err, msg: self.reports.append(
                    (handler, topic, err, _offset(msg) if err is None else -1)
                ),
                timestamp=timestamp_ms,
                headers=headers,
            )
        except BufferError as exc:
            raise StorageError(f"write to {topic}: the producer queue is full") from exc
        except KafkaException as exc:
            raise storage_error(f"write to {topic}", exc) from exc
        pending = self.pending
        pending[topic] = pending.get(topic, 0) + 1

    @property
    def closed(self) -> bool:
        return self._retirement is not None and self._retirement.done()

    def retire(self) -> None:
        """A fresh producer took over: close once what this one holds is settled."""
        self._retired = True
        if not self.pending:
            self._close_when_retired()

    def _close_when_retired(self) -> None:
        if self._retirement is None and not self.stopping.is_set():
            self._retirement = self._loop.create_task(self._close_retired())

    async def _close_retired(self) -> None:
        await self.close()
        # librdkafka destroys a client when its Python object goes, which joins the
        # client's threads: in a worker thread, not on the loop.
        await asyncio.to_thread(self._destroy)

    def _destroy(self) -> None:
        del self.producer
        release_freed_memory()

    async def close(self, timeout_seconds: float | None = None) -> None:
        """Wait for queued records (bounded by the delivery timeout, or ``timeout_seconds``
        if shorter) and stop the thread; what is still queued then is purged."""
        if timeout_seconds is not None:
            self._flush_timeout_s = min(self._flush_timeout_s, timeout_seconds)
        self.stopping.set()
        await asyncio.to_thread(self._thread.join)

    # --- poll thread ----------------------------------------------------------------
    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            log.error("Kafka producer fatal error, replacing the producer: %s", error.str())
            self._fatal = True
        else:
            log.debug("Kafka producer: %s", error.str())

    def _hand_over(self) -> None:
        if not self.reports:
            return
        batch, self.reports = self.reports, []
        try:
            self._loop.call_soon_threadsafe(self._dispatch, batch)
        except RuntimeError:
            log.warning("event loop closed; %d delivery reports dropped", len(batch))

    def _replace_fatal_producer(self) -> None:
        old = self.producer
        self._fatal = False
        self.producer = Producer(self._conf)
        old.purge()
        old.flush(self._flush_timeout_s)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.producer.poll(_POLL_INTERVAL_S)
                if self._fatal:
                    self._replace_fatal_producer()
            except Exception:
                log.exception("Kafka producer poll failed")
            self._hand_over()
        try:
            remaining = self.producer.flush(self._flush_timeout_s)
            if remaining:
                log.warning("%d records still unacknowledged at shutdown", remaining)
                self.producer.purge()
                self.producer.flush(1)
        except Exception:
            log.exception("Kafka producer flush failed")
        self._hand_over()
