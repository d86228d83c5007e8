"""Load a topic, or a range of message ids, into a Spark DataFrame (a batch read).

One Spark partition per topic partition. Each task opens the official client's reader at
the start of the range and reads until the end of the range, or, without an end, until
the reader reports that nothing more is available (the topic as it is when the task
runs). Give an explicit end for a read that returns the same rows when Spark recomputes
a partition while producers are still writing.

Columns: ``topic`` (the partition's topic), ``partition`` (-1 if not partitioned),
``key`` (partition key, null if none), ``value`` (bytes), ``properties``
(map<string,string>), ``publish_time``, ``event_time`` (null if not set), ``message_id``
(the official client's serialized id, ``pulsar.MessageId.deserialize`` reads it),
``ledger_id``, ``entry_id``, ``batch_index``, ``producer_name``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import pulsar

from connectors.client_security import new_client
from connectors.positions import Position, partition_index

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

IdLike = Union[Position, pulsar.MessageId]  # noqa: UP007 - evaluated at runtime
Bound = IdLike | Mapping[str | int, IdLike] | None

DEFAULT_READ_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """What one Spark task reads: a partition and optional bounds (picklable)."""

    service_url: str
    topic: str
    start: Position | None
    start_inclusive: bool
    end: Position | None
    end_inclusive: bool
    read_timeout_ms: int
    client_options: tuple[tuple[str, Any], ...] = ()

    def before_start(self, position: Position) -> bool:
        if self.start is None:
            return False
        return position < self.start or (position == self.start and not self.start_inclusive)

    def after_end(self, position: Position) -> bool:
        if self.end is None:
            return False
        return position > self.end or (position == self.end and not self.end_inclusive)


def schema() -> StructType:
    """The DataFrame's schema (pyspark imported only when used)."""
    from pyspark.sql import types as t

    return t.StructType(
        [
            t.StructField("topic", t.StringType(), False),
            t.StructField("partition", t.IntegerType(), False),
            t.StructField("key", t.StringType(), True),
            t.StructField("value", t.BinaryType(), False),
            t.StructField("properties", t.MapType(t.StringType(), t.StringType()), False),
            t.StructField("publish_time", t.TimestampType(), False),
            t.StructField("event_time", t.TimestampType(), True),
            t.StructField("message_id", t.BinaryType(), False),
            t.StructField("ledger_id", t.LongType(), False),
            t.StructField("entry_id", t.LongType(), False),
            t.StructField("batch_index", t.IntegerType(), False),
            t.StructField("producer_name", t.StringType(), False),
        ]
    )


def read_topic(
    spark: SparkSession,
    service_url: str,
    topic: str,
    *,
    start: Bound = None,
    end: Bound = None,
    start_inclusive: bool = True,
    end_inclusive: bool = True,
    read_timeout_ms: int = DEFAULT_READ_TIMEOUT_MS,
    client_options: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The messages of ``topic`` (all partitions) in ``[start, end]`` as a DataFrame.

    ``start`` / ``end`` are a message id (``pulsar.MessageId`` or ``Position``) that bounds
    every partition, or a mapping from a partition (its topic name or its index) to the id
    bounding that partition; partitions missing from a mapping are not bounded. No start:
    from the earliest message; no end: up to what is available when the task runs.
    """
    client = new_client(service_url, dict(client_options or {}))
    try:
        partitions = list(client.get_topic_partitions(topic))
    finally:
        client.close()
    ranges = [
        PartitionRange(
            service_url=service_url,
            topic=partition,
            start=_bound_for(start, partition),
            start_inclusive=start_inclusive,
            end=_bound_for(end, partition),
            end_inclusive=end_inclusive,
            read_timeout_ms=read_timeout_ms,
            client_options=tuple(sorted((client_options or {}).items())),
        )
        for partition in partitions
    ]
    rdd = spark.sparkContext.parallelize(ranges, len(ranges)).flatMap(read_partition)
    return spark.createDataFrame(rdd, schema())


def _bound_for(bound: Bound, partition: str) -> Position | None:
    if bound is None:
        return None
    if not isinstance(bound, Mapping):
        return _position(bound)
    for key in (partition, partition_index(partition)):
        if key in bound:
            return _position(bound[key])
    return None


def _position(value: IdLike) -> Position:
    # The client hands out ``_pulsar.MessageId`` objects, not ``pulsar.MessageId`` ones.
    return value if isinstance(value, Position) else Position.of(value)


def read_partition(spec: PartitionRange) -> Iterator[tuple[Any, ...]]:
    """Rows of one partition's range (runs on an executor)."""
    client = new_client(spec.service_url, dict(spec.client_options))
    try:
        if spec.start is None:
            start, inclusive = pulsar.MessageId.earliest, False
        else:
            # From the start of the entry, inclusively; rows before the bound are skipped
            # here, so a start inside a batch is exact whatever the broker sends.
            start, inclusive = spec.start.entry_start(partition_index(spec.topic)), True
        reader = client.create_reader(spec.topic, start, start_message_id_inclusive=inclusive)
        try:
            while reader.has_message_available():
                message = reader.read_next(spec.read_timeout_ms)
                position = Position.of(message.message_id())
                if spec.before_start(position):
                    continue
                if spec.after_end(position):
                    break
                yield _row(spec.topic, message)
        finally:
            reader.close()
    finally:
        client.close()


def _row(topic: str, message: pulsar.Message) -> tuple[Any, ...]:
    message_id = message.message_id()
    event_ms = message.event_timestamp()
    return (
        topic,
        partition_index(topic),
        message.partition_key() or None,
        message.data(),
        dict(message.properties()),
        _timestamp(message.publish_timestamp()),
        _timestamp(event_ms) if event_ms else None,
        message_id.serialize(),
        message_id.ledger_id(),
        message_id.entry_id(),
        message_id.batch_index(),
        message.producer_name(),
    )


def _timestamp(millis: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC)
