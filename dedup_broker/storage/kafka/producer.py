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

If librdkafka reports a fatal error (the idempotent producer can no longer guarantee
ordering), that producer is replaced by a fresh one; everything still queued in the old
one fails, which the managed ledgers treat like any other failed write.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, UnknownTopicError
from dedup_broker.kafka_logging import kafka_logger

log = logging.getLogger(__name__)

MAX_RECORD_OVERHEAD = 1024 * 1024
"""Room above ``maxMessageSize`` for record and batch framing."""

_POLL_INTERVAL_S = 0.05


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
        self._shards = [_PolledProducer(config, loop, i) for i in range(count)]

    def _shard(self, topic: str) -> _PolledProducer:
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
        shard = self._shard(topic)
        if shard.stopping.is_set():
            raise StorageError("the Kafka producer is closed")
        try:
            shard.producer.produce(
                topic,
                value,
                key,
                partition,
                # ``shard.reports`` looked up when the report comes: the poll thread
                # hands the list over and starts a new one.
                on_delivery=lambda err, msg: shard.reports.append(
                    (handler, err, _offset(msg) if err is None else -1)
                ),
                timestamp=timestamp_ms,
                headers=list(headers) if headers else None,
            )
        except BufferError as exc:
            raise StorageError(f"write to {topic}: the producer queue is full") from exc
        except KafkaException as exc:
            raise storage_error(f"write to {topic}", exc) from exc

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


class _PolledProducer:
    """One librdkafka producer and the thread that polls it."""

    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop, index: int) -> None:
        self._loop = loop
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
        self.reports: list[tuple[DeliveryHandler, KafkaError | None, int]] = []
        self._fatal = False
        self.stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"kafka-producer-poll-{index}", daemon=True
        )
        self._thread.start()

    # --- event loop side ------------------------------------------------------------
    def _dispatch(self, batch: list[tuple[DeliveryHandler, KafkaError | None, int]]) -> None:
        for handler, error, offset in batch:
            try:
                handler.on_delivery(error, offset)
            except Exception:
                log.exception("delivery handler %r failed", handler)

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
