"""Following the metadata tables as Kafka grows them, so a refresh is one offset query.

A refresh must see everything stored before it was asked for. Reading the table's new
records on demand costs an assign, a fetch and an end-of-partition wait per refresh
(tens of milliseconds, and a topic load refreshes several times). Instead one consumer
stays assigned to every table's partition from where its first full read ended, in a
thread of its own, and hands what it reads to the tables on the event loop; a refresh
then asks Kafka where the table ends (its last stable offset) and waits until the tail is
there. The consumer reads committed records only, and its position moves past
transaction markers, so the tail reaches exactly the offset a refresh asks about.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

from dedup_broker.config import BrokerConfig
from dedup_broker.kafka_logging import kafka_logger
from dedup_broker.storage.kafka.reader import record_headers
from dedup_broker.storage.values import FetchedRecord

log = logging.getLogger(__name__)

_BATCH = 1000
_POLL_SECONDS = 0.05
"""How long one poll waits for a record; it bounds how long closing the tail takes."""


class Tailed(Protocol):
    """A table the tail feeds (a metadata table's view)."""

    topic: str

    def tail_start(self) -> int: ...

    def take_tail(self, records: list[FetchedRecord], position: int) -> None: ...


class TableTail:
    """One consumer and one thread following the tables' partitions (partition 0)."""

    def __init__(self, config: BrokerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._conf: dict[str, Any] = {
            **config.kafka_connection(),
            "client.id": f"{config.cluster_name}.broker-table-tail",
            "logger": kafka_logger(),
            # Required by the client, never used: no subscribe, no commit.
            "group.id": f"{config.cluster_name}.broker-table-tail",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "allow.auto.create.topics": False,
            # A long poll: Kafka answers a waiting fetch as soon as a record (or, read
            # committed, a commit marker) arrives, so the wait costs no latency; a short
            # one (10 ms) kept Kafka busy answering 100 empty fetches a second, about a
            # tenth of a core with the broker idle.
            "fetch.wait.max.ms": 500,
        }
        self._tables: dict[str, Tailed] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, tables: Sequence[Tailed]) -> None:
        """Start following ``tables`` from where each of them has read to."""
        self._tables = {table.topic: table for table in tables}
        consumer = Consumer(self._conf)
        consumer.assign([TopicPartition(table.topic, 0, table.tail_start()) for table in tables])
        self._thread = threading.Thread(
            target=self._run, args=(consumer,), name="metadata-tail", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop following (blocks up to one poll interval plus the consumer's close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self, consumer: Consumer) -> None:
        partitions = [TopicPartition(topic, 0) for topic in self._tables]
        delivered: dict[str, int] = {}
        try:
            while not self._stop.is_set():
                try:
                    self._poll_once(consumer, partitions, delivered)
                except Exception:  # the tables fall back to reading themselves
                    log.warning("following the metadata tables failed", exc_info=True)
                    self._stop.wait(1.0)
        finally:
            try:
                consumer.close()
            except Exception:
                log.debug("closing the metadata tail's consumer failed", exc_info=True)

    def _poll_once(
        self, consumer: Consumer, partitions: list[TopicPartition], delivered: dict[str, int]
    ) -> None:
        # poll returns with the first record; consume(.., 0) then takes what else is there
        # (a consume with a timeout would wait for a full batch).
        first = consumer.poll(_POLL_SECONDS)
        batch = [] if first is None else [first, *consumer.consume(_BATCH, 0)]
        by_topic: dict[str, list[FetchedRecord]] = {}
        for msg in batch:
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.debug("metadata tail: %s", error)
                continue
            topic, offset = msg.topic(), msg.offset()
            if topic is None or offset is None:
                continue
            by_topic.setdefault(topic, []).append(
                FetchedRecord(
                    offset, msg.key(), msg.value(), msg.timestamp()[1], record_headers(msg)
                )
            )
        positions = {
            tp.topic: tp.offset
            for tp in consumer.position(partitions)
            if tp.offset >= 0 and tp.offset != delivered.get(tp.topic)
        }
        if by_topic or positions:
            delivered.update(positions)
            self._loop.call_soon_threadsafe(self._deliver, by_topic, positions)

    def _deliver(self, by_topic: dict[str, list[FetchedRecord]], positions: dict[str, int]) -> None:
        for topic, table in self._tables.items():
            records = by_topic.get(topic, [])
            position = positions.get(topic, -1)
            if records or position >= 0:
                table.take_tail(records, position)
