"""One librdkafka producer, the thread that polls it, and the pace of a ledger's records.

librdkafka calls delivery callbacks from ``poll()``; a dedicated thread per producer
polls, collects the reports of one poll in a list and hands the whole list to the event
loop with a single ``call_soon_threadsafe``: at thousands of appends per second that is
one thread hop per batch, not per record.

A ledger's records are handed to librdkafka in step with their acknowledgements. Its
idempotent producer sends nothing more to a partition while ``IN_FLIGHT_RECORDS`` of the
partition's records are in flight, and while records ready to go wait for that, its
thread polls without sleeping: at 1 KB messages near saturation it burned half a core
doing so (``git show 6305f93:docs/benchmarks.md``, "Kafka's share behind the broker").
So once that many records of a single-partition topic are unacknowledged, the next ones
wait here and go to librdkafka together, at most one request's worth, when the earlier
ones are reported.

If librdkafka reports a fatal error (the idempotent producer can no longer guarantee
ordering), that producer is replaced by a fresh one; everything still queued in the old
one fails, which the managed ledgers treat like any other failed write.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.kafka_logging import kafka_logger
from dedup_broker.storage.kafka.common import max_record_bytes, release_freed_memory, storage_error

log = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.05
IN_FLIGHT_RECORDS = 5
"""librdkafka's idempotent producer creates no request for a partition while this many of
its records are in flight (``RD_KAFKA_IDEMP_MAX_INFLIGHT``, counted in records)."""

Headers = list[tuple[str, str | bytes | None]]


class DeliveryHandler(Protocol):
    def on_delivery(self, error: KafkaError | None, offset: int) -> None:
        """Called on the event loop once Kafka acknowledged (or failed) the record."""


def _offset(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else offset


class Record(NamedTuple):
    """A record as the broker queues it, until it is handed to librdkafka."""

    value: bytes | None
    handler: DeliveryHandler
    key: bytes | None
    partition: int
    timestamp_ms: int
    headers: Headers | None
    single_partition: bool

    @property
    def size(self) -> int:
        return len(self.value or b"") + len(self.key or b"")


_Report = tuple[DeliveryHandler, str, KafkaError | None, int, bool]
"""A delivery report: handler, topic, error, offset, and whether the record was paced
(counted in its topic's records handed to librdkafka)."""


class PolledProducer:
    """One librdkafka producer and the thread that polls it."""

    def __init__(
        self,
        config: BrokerConfig,
        loop: asyncio.AbstractEventLoop,
        index: int,
        settled: Callable[[PolledProducer, str], None],
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
        self._request_bytes = record_bytes
        self.reports: list[_Report] = []
        self.pending: dict[str, int] = {}
        """Records queued and not yet reported to the loop, per topic."""
        self._handed: dict[str, int] = {}
        """Per single-partition topic, records in librdkafka and not yet reported."""
        self._waiting: dict[str, deque[Record]] = {}
        """Per single-partition topic, records waiting for earlier ones' reports."""
        self._retired = False
        self._retirement: asyncio.Task[None] | None = None
        self._fatal = False
        self.stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"kafka-producer-poll-{index}", daemon=True
        )
        self._thread.start()

    # --- event loop side ------------------------------------------------------------
    def _dispatch(self, batch: list[_Report]) -> None:
        handed = self._handed
        for handler, topic, error, offset, paced in batch:
            if paced:
                left = handed[topic] - 1
                if left:
                    handed[topic] = left
                else:
                    del handed[topic]
            self._report(handler, topic, error, offset)
        if self._waiting:
            for topic in [t for t in self._waiting if handed.get(t, 0) < IN_FLIGHT_RECORDS]:
                self._release(topic)

    def _report(
        self, handler: DeliveryHandler, topic: str, error: KafkaError | None, offset: int
    ) -> None:
        try:
            handler.on_delivery(error, offset)
        except Exception:
            log.exception("delivery handler %r failed", handler)
        pending = self.pending
        left = pending[topic] - 1
        if left:
            pending[topic] = left
        else:
            del pending[topic]
            if self._retired:
                self._settled(self, topic)
                if not pending:
                    self._close_when_retired()

    def produce(self, topic: str, record: Record) -> None:
        if self.stopping.is_set():
            raise StorageError("the Kafka producer is closed")
        if record.single_partition and (
            topic in self._waiting or self._handed.get(topic, 0) >= IN_FLIGHT_RECORDS
        ):
            self._waiting.setdefault(topic, deque()).append(record)
        else:
            self._hand(topic, record)
        pending = self.pending
        pending[topic] = pending.get(topic, 0) + 1

    def _hand(self, topic: str, record: Record) -> None:
        """Give ``record`` to librdkafka; raises StorageError if it cannot take it."""
        if self.stopping.is_set():
            raise StorageError("the Kafka producer is closed")
        handler, paced = record.handler, record.single_partition
        try:
            self.producer.produce(
                topic,
                record.value,
                record.key,
                record.partition,
                # ``self.reports`` looked up when the report comes: the poll thread hands
                # the list over and starts a new one.
                on_delivery=lambda err, msg: self.reports.append(
                    (handler, topic, err, _offset(msg) if err is None else -1, paced)
                ),
                timestamp=record.timestamp_ms,
                headers=record.headers,
            )
        except BufferError as exc:
            raise StorageError(f"write to {topic}: the producer queue is full") from exc
        except KafkaException as exc:
            raise storage_error(f"write to {topic}", exc) from exc
        if paced:
            self._handed[topic] = self._handed.get(topic, 0) + 1

    def _release(self, topic: str, budget: float | None = None) -> None:
        """Hand the waiting records of ``topic`` to librdkafka: at most one request's worth
        (more would wait in librdkafka with the same polling), or all when closing."""
        waiting = self._waiting[topic]
        left = self._request_bytes if budget is None else budget
        first = True
        while waiting and (first or waiting[0].size <= left):
            first = False
            record = waiting.popleft()
            left -= record.size
            try:
                self._hand(topic, record)
            except StorageError as exc:
                # Those behind it would be stored out of order: they fail with it.
                failed = [record, *waiting]
                waiting.clear()
                for each in failed:
                    self._report(each.handler, topic, KafkaError(KafkaError._FAIL, str(exc)), -1)
        if not waiting:
            del self._waiting[topic]

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
        for topic in list(self._waiting):
            self._release(topic, budget=math.inf)
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
