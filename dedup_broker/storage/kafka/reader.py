"""Reading records back from Kafka: a small pool of consumers, each used by one thread.

The consumers never join a group nor commit: a read assigns the partition at an exact
offset, consumes up to a known end offset and hands the records back. The calls block,
so they run in the pool's own worker threads, never on the event loop.

A *scan* (a replay over many records) has consumers and threads of its own, tuned for
throughput (large fetches), and hands the values straight to a callback in its worker
thread instead of building a record object per value, so reads are never queued behind
it and a million records cost no more objects than librdkafka's own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.kafka_logging import kafka_logger
from dedup_broker.storage.kafka.common import max_record_bytes, release_freed_memory, storage_error
from dedup_broker.storage.values import FetchedRecord

log = logging.getLogger(__name__)

_CONSUME_WAIT_S = 0.1
_MAX_KNOWN_TOPICS = 1_000
"""Topics a pooled consumer learns before it is replaced by a fresh one: librdkafka keeps
what it learned of every topic (deleted ledgers included) for the client's lifetime."""
_SCAN_CONSUME = 50_000
"""Records asked of librdkafka per ``consume`` call while scanning."""
_SCAN_MIN_FETCH_BYTES = 16 * 1024 * 1024

ValuesVisitor = Callable[[int, list[bytes]], None]
"""``(offset of the first value, values of consecutive records)``; a missing value is b""."""
KeysVisitor = Callable[[int, bytes | None], bool]
"""``(offset, key)`` of one record; False stops the scan there."""


@dataclass(slots=True)
class _PooledConsumer:
    conf: dict[str, Any]
    consumer: Consumer
    known_topics: set[str] = field(default_factory=set)

    def renew(self) -> None:
        """A fresh consumer in place of one that learned too many topics."""
        old, self.consumer = self.consumer, Consumer(self.conf)
        self.known_topics.clear()
        try:
            old.close()
        except Exception:
            log.debug("closing a reader consumer failed", exc_info=True)
        del old  # librdkafka destroys the client with its Python object
        release_freed_memory()


def record_headers(msg: Message) -> tuple[tuple[str, bytes], ...]:
    headers = msg.headers() or ()
    pairs = headers.items() if isinstance(headers, dict) else headers
    return tuple((name, value) for name, value in pairs if isinstance(value, bytes))


class KafkaReader:
    def __init__(self, config: BrokerConfig) -> None:
        size = max(1, config.kafka_reader_pool_size)
        self._timeout_s = config.kafka_request_timeout_ms / 1000
        fetch_bytes = 2 * max_record_bytes(config)
        self._conf: dict[str, Any] = {
            **config.kafka_connection(),
            "client.id": f"{config.cluster_name}.broker-reader",
            "logger": kafka_logger(),
            # Required by the client, never used: no subscribe, no commit.
            "group.id": f"{config.cluster_name}.broker-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            # Metadata written in write-fence transactions counts once committed only.
            "isolation.level": "read_committed",
            "allow.auto.create.topics": False,
            # A consumer has one fetch in flight per broker; a long wait at the end of one
            # read would delay the next read's first fetch.
            "fetch.wait.max.ms": 10,
            "fetch.max.bytes": fetch_bytes,
            "receive.message.max.bytes": fetch_bytes + 1024 * 1024,
            "queued.max.messages.kbytes": fetch_bytes // 1024,
        }
        # Scans fetch as much as one partition fetch may carry (librdkafka's 1 MiB
        # default per partition would cost a round trip per megabyte).
        scan_bytes = max(fetch_bytes, _SCAN_MIN_FETCH_BYTES)
        self._scan_conf: dict[str, Any] = self._conf | {
            "client.id": f"{config.cluster_name}.broker-scanner",
            "fetch.max.bytes": scan_bytes,
            "max.partition.fetch.bytes": scan_bytes,
            "receive.message.max.bytes": scan_bytes + 1024 * 1024,
            "queued.max.messages.kbytes": 2 * scan_bytes // 1024,
            "queued.min.messages": 4 * _SCAN_CONSUME,
        }
        self._idle: queue.SimpleQueue[_PooledConsumer] = queue.SimpleQueue()
        self._idle_scanners: queue.SimpleQueue[_PooledConsumer] = queue.SimpleQueue()
        self._consumers: list[_PooledConsumer] = []
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=size, thread_name_prefix="kafka-reader"
        )
        self._scan_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=size, thread_name_prefix="kafka-scanner"
        )

    async def fetch(
        self,
        topic: str,
        start: int,
        end: int,
        max_bytes: int | None = None,
        partition: int = 0,
    ) -> list[FetchedRecord]:
        """Records with ``start <= offset < end`` in offset order.

        Stops early once ``max_bytes`` of values were read (at least one record is always
        returned) or at the partition's end; offsets missing because of compaction are
        simply skipped.
        """
        if end <= start:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._fetch_blocking, topic, partition, start, end, max_bytes
        )

    async def scan(
        self, topic: str, start: int, end: int, visit: ValuesVisitor, partition: int = 0
    ) -> int:
        """Hands the values of records ``start <= offset < end`` to ``visit``, in order.

        ``visit`` runs in a worker thread, once per run of consecutive records (the event
        loop must not touch what it touches until this returns). Returns the offset after
        the last record handed: ``end``, or less if the partition ends before it.
        """
        if end <= start:
            return start
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._scan_executor, self._scan_blocking, topic, partition, start, end, visit
        )

    async def scan_keys(
        self, topic: str, start: int, end: int, visit: KeysVisitor, partition: int = 0
    ) -> int:
        """Hands each record's ``(offset, key)`` for ``start <= offset < end`` to ``visit``
        (in a worker thread) until it answers False. Returns the offset it stopped at:
        that record's, or ``end`` (less if the partition ends before it) when it never
        stopped."""
        if end <= start:
            return start
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._scan_executor, self._scan_keys, topic, partition, start, end, visit
        )

    def _take(
        self, idle: queue.SimpleQueue[_PooledConsumer], conf: dict[str, Any]
    ) -> _PooledConsumer:
        try:
            pooled = idle.get_nowait()
        except queue.Empty:
            pooled = _PooledConsumer(conf, Consumer(conf))
            self._consumers.append(pooled)
        return pooled

    def _know(self, pooled: _PooledConsumer, topic: str) -> None:
        if topic not in pooled.known_topics:
            if len(pooled.known_topics) >= _MAX_KNOWN_TOPICS:
                pooled.renew()
            # Without this the client learns a new topic's leader only on its next
            # periodic metadata scan, up to a second later. Only a shortcut: when it
            # fails (Kafka busy or restarting) the read goes on and says what it met.
            try:
                pooled.consumer.list_topics(topic, timeout=self._timeout_s)
            except KafkaException as exc:
                log.debug("metadata of %s before a read failed: %s", topic, exc)
                return
            pooled.known_topics.add(topic)

    def _fetch_blocking(
        self, topic: str, partition: int, start: int, end: int, max_bytes: int | None
    ) -> list[FetchedRecord]:
        pooled = self._take(self._idle, self._conf)
        try:
            self._know(pooled, topic)
            return self._read(pooled.consumer, topic, partition, start, end, max_bytes)
        finally:
            self._idle.put(pooled)

    @contextlib.contextmanager
    def _scanner(self, topic: str) -> Iterator[Consumer]:
        """A scanning consumer that knows ``topic``, back in the pool afterwards."""
        pooled = self._take(self._idle_scanners, self._scan_conf)
        try:
            self._know(pooled, topic)
            yield pooled.consumer
        finally:
            self._idle_scanners.put(pooled)

    def _scan_blocking(
        self, topic: str, partition: int, start: int, end: int, visit: ValuesVisitor
    ) -> int:
        with self._scanner(topic) as consumer:
            return self._scan(consumer, topic, partition, start, end, visit)

    def _scan(
        self,
        consumer: Consumer,
        topic: str,
        partition: int,
        start: int,
        end: int,
        visit: ValuesVisitor,
    ) -> int:
        next_offset = start
        for batch in self._batches(consumer, topic, partition, start, end):
            run_start = next_offset
            values: list[bytes] = []
            for offset, msg in batch:
                if offset != next_offset and values:
                    visit(run_start, values)  # a gap: hand over the run before it
                    values = []
                if not values:
                    run_start = offset
                values.append(msg.value() or b"")
                next_offset = offset + 1
            visit(run_start, values)
        return next_offset

    def _scan_keys(
        self, topic: str, partition: int, start: int, end: int, visit: KeysVisitor
    ) -> int:
        with (
            self._scanner(topic) as consumer,
            contextlib.closing(self._batches(consumer, topic, partition, start, end)) as batches,
        ):  # closed (the partition unassigned) before the consumer goes back
            next_offset = start
            for batch in batches:
                for offset, msg in batch:
                    if not visit(offset, msg.key()):
                        return offset
                    next_offset = offset + 1
            return next_offset

    def _batches(
        self, consumer: Consumer, topic: str, partition: int, start: int, end: int
    ) -> Generator[list[tuple[int, Message]], None, None]:
        """The records ``start <= offset < end`` with their offsets, in offset order, in
        non-empty batches, until ``end`` or the partition's end."""
        consumer.assign([TopicPartition(topic, partition, start)])
        next_offset = start
        # The timeout bounds a wait without progress: a long scan is not a slow one.
        deadline = time.monotonic() + self._timeout_s
        try:
            while next_offset < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StorageError(
                        f"scan {topic}[{start}, {end}): timed out at offset {next_offset}"
                    )
                batch = consumer.consume(
                    min(end - next_offset, _SCAN_CONSUME), min(remaining, _CONSUME_WAIT_S)
                )
                wanted: list[tuple[int, Message]] = []
                done = False
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        raise storage_error(f"scan {topic} at offset {next_offset}", error)
                    offset = msg.offset()
                    if offset is None or offset < next_offset:
                        continue
                    if offset >= end:
                        done = True
                        break
                    wanted.append((offset, msg))
                    next_offset = offset + 1
                if wanted:
                    yield wanted
                    deadline = time.monotonic() + self._timeout_s
                if done:
                    break
        finally:
            consumer.unassign()

    def _read(
        self,
        consumer: Consumer,
        topic: str,
        partition: int,
        start: int,
        end: int,
        max_bytes: int | None,
    ) -> list[FetchedRecord]:
        consumer.assign([TopicPartition(topic, partition, start)])
        records: list[FetchedRecord] = []
        size = 0
        next_offset = start
        deadline = time.monotonic() + self._timeout_s
        try:
            while next_offset < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StorageError(
                        f"read {topic}[{start}, {end}): timed out at offset {next_offset}"
                    )
                wanted = min(end - next_offset, 10_000)
                for msg in consumer.consume(wanted, min(remaining, _CONSUME_WAIT_S)):
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            return records
                        raise storage_error(f"read {topic} at offset {next_offset}", error)
                    offset = msg.offset()
                    if offset is None or offset < next_offset:
                        continue
                    if offset >= end:
                        return records
                    value = msg.value()
                    records.append(
                        FetchedRecord(
                            offset,
                            msg.key(),
                            value,
                            msg.timestamp()[1],
                            record_headers(msg),
                        )
                    )
                    next_offset = offset + 1
                    size += len(value or b"")
                    if max_bytes is not None and size >= max_bytes:
                        return records
            return records
        finally:
            consumer.unassign()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._scan_executor.shutdown(wait=True)
        for pooled in self._consumers:
            try:
                pooled.consumer.close()
            except Exception:
                log.debug("closing a reader consumer failed", exc_info=True)
        self._consumers.clear()
