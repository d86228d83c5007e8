"""The worker group's backlog over the main and RETRY topics: what it has not committed.

``group_lag`` counts it (estimated deletions in flight); ``uncommitted_records`` reads it
(the doctor: ledgers that intents still pending will delete). Both only look at the
group's committed offsets; neither joins the group nor commits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from dedup_broker.errors import StorageError
from system_topics.topics import DeletionTopics

_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class _Backlog:
    topic: str
    partition: int
    start: int
    """The group's committed offset (the partition's start if none)."""
    end: int


def _group_reader(connection: dict[str, str], topics: DeletionTopics) -> Consumer:
    return Consumer(
        {
            **connection,
            "group.id": topics.group,
            "client.id": f"{topics.group}-backlog-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
        }
    )


def _backlogs(consumer: Consumer, topic: str, timeout: float) -> Iterator[_Backlog]:
    described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if described is None or described.error is not None:
        return
    partitions = [TopicPartition(topic, p) for p in sorted(described.partitions)]
    for tp in consumer.committed(partitions, timeout=timeout):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, tp.partition), timeout=timeout
        )
        start = tp.offset if tp.offset >= 0 else low
        yield _Backlog(topic, tp.partition, start, high)


def group_lag(
    connection: dict[str, str], topics: DeletionTopics, timeout: float = 10.0
) -> dict[str, int]:
    """Records not yet committed by the worker group, per topic (main, retry)."""
    consumer = _group_reader(connection, topics)
    try:
        return {
            topic: sum(max(b.end - b.start, 0) for b in _backlogs(consumer, topic, timeout))
            for topic in (topics.main, topics.retry)
        }
    finally:
        consumer.close()


def uncommitted_records(
    connection: dict[str, str], topics: DeletionTopics, timeout: float = 10.0
) -> list[bytes | None]:
    """The values of every record of the main and RETRY topics the group has not
    committed yet (StorageError if they cannot be read within ``timeout`` per partition)."""
    consumer = _group_reader(connection, topics)
    values: list[bytes | None] = []
    try:
        for topic in (topics.main, topics.retry):
            for backlog in _backlogs(consumer, topic, timeout):
                if backlog.start < backlog.end:
                    values += _read(consumer, backlog, timeout)
    finally:
        consumer.close()
    return values


def _read(consumer: Consumer, backlog: _Backlog, timeout: float) -> list[bytes | None]:
    where = f"{backlog.topic}[{backlog.partition}]"
    consumer.assign([TopicPartition(backlog.topic, backlog.partition, backlog.start)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                raise StorageError(f"reading {where}: timed out")
            msg = consumer.poll(_POLL_S)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return values
                raise StorageError(f"reading {where}: {error.str()}")
            offset = msg.offset()
            if offset is None or offset >= backlog.end:
                return values
            values.append(msg.value())
            if offset + 1 >= backlog.end:
                return values
    finally:
        consumer.unassign()
