"""Reading side of the ``dedup-broker`` Spark data source (batch and streaming).

The driver decides, per topic partition, the range ``(start, end]`` of message positions a
batch covers (``connectors.datasource_offsets``): the end is the partition's last message
(the broker's ``lastMessageId`` admin call), or, with ``maxOffsetsPerTrigger``, the
position reached after reading that many messages ahead. Each Spark task then reads one
partition's range from the start of the start's entry, cutting off what lies before the
range and stopping at its end, so a replayed batch returns exactly the same rows in the
same order: by default whole entries with the lean client, handed to Spark as Arrow
record batches (``connectors.arrow_reader``); with the option ``client`` = ``official``,
message by message with the official client's ``Reader``.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulsar
import pyarrow as pa
from pyspark.sql import types as t
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from connectors.arrow_reader import ReadError, count_ahead, read_arrow_range
from connectors.client_security import ClientSecurity
from connectors.datasource_offsets import (
    Offset,
    decode,
    encode,
    has_messages,
    is_after,
    is_through,
    parse_topics,
    reaches,
    share,
    starting_positions,
)
from connectors.positions import NOTHING, Position, partition_index
from connectors.sink_options import ClientKind
from connectors.wire import WireClient, WireSettings

__all__ = [
    "SCHEMA",
    "BatchReader",
    "ReadError",
    "SourceOptions",
    "StreamReader",
    "TopicRange",
    "read_range",
]

log = logging.getLogger(__name__)

SPARK_SCHEMA = t.StructType(
    [
        t.StructField("key", t.StringType()),
        t.StructField("value", t.BinaryType()),
        t.StructField("properties", t.MapType(t.StringType(), t.StringType())),
        t.StructField("publish_time", t.TimestampType()),
        t.StructField("event_time", t.TimestampType()),
        t.StructField("message_id", t.StringType()),
        t.StructField("producer_name", t.StringType()),
        t.StructField("topic", t.StringType()),
        t.StructField("partition", t.IntegerType()),
    ]
)
SCHEMA = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in SPARK_SCHEMA.fields)
"""The rows' columns. ``message_id`` is ``ledger:entry:batchIndex`` in ``topic``."""

DEFAULT_READ_TIMEOUT_MS = 30_000


@functools.cache
def arrow_schema() -> pa.Schema:
    """The rows' columns as Arrow types, exactly as Spark expects record batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema: pa.Schema = to_arrow_schema(SPARK_SCHEMA, timezone="UTC")
    return schema


@dataclass(frozen=True)
class SourceOptions:
    """The reading options, parsed once on the driver."""

    service_url: str
    admin_url: str
    topics: tuple[str, ...]
    starting_offsets: str | None
    max_offsets_per_trigger: int | None
    read_timeout_ms: int
    security: ClientSecurity = field(default_factory=ClientSecurity)
    client: ClientKind = ClientKind.LEAN

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        def get(name: str) -> str | None:
            value = options.get(name)
            return None if value is None or value == "" else str(value)

        service_url, admin_url = get("serviceUrl"), get("adminUrl")
        if service_url is None or admin_url is None:
            raise ValueError(
                "the options 'serviceUrl' (pulsar://) and 'adminUrl' (http://) are needed"
            )
        limit = get("maxOffsetsPerTrigger")
        if limit is not None and int(limit) < 1:
            raise ValueError("maxOffsetsPerTrigger must be at least 1")
        return cls(
            service_url=service_url,
            admin_url=admin_url.rstrip("/"),
            topics=tuple(parse_topics(get("topic"), get("topics"))),
            starting_offsets=get("startingOffsets"),
            max_offsets_per_trigger=int(limit) if limit is not None else None,
            read_timeout_ms=int(get("readTimeoutMs") or DEFAULT_READ_TIMEOUT_MS),
            security=ClientSecurity.from_options(get),
            client=ClientKind(get("client") or ClientKind.LEAN.value),
        )


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One Spark task: the messages of one topic partition after ``start``, through ``end``."""

    service_url: str
    topic: str
    start: tuple[int, int, int]
    end: tuple[int, int, int]
    read_timeout_ms: int
    security: ClientSecurity = field(default_factory=ClientSecurity)
    client: ClientKind = ClientKind.LEAN


# --- driver side -------------------------------------------------------------------------
class _Planner:
    """Partition lists, last message ids and read-ahead on the driver (not pickled)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: pulsar.Client | None = None
        self._wire: WireClient | None = None

    @property
    def client(self) -> pulsar.Client:
        if self._client is None:
            self._client = pulsar.Client(
                self.options.service_url,
                logger=logging.getLogger("pulsar"),
                **self.options.security.client_kwargs(),
            )
        return self._client

    @property
    def wire(self) -> WireClient:
        if self._wire is None:
            settings = WireSettings(security=self.options.security)
            self._wire = WireClient(self.options.service_url, settings)
        return self._wire

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    def partitions(self) -> list[str]:
        """Every partition of every topic read (a partitioned topic's ``-partition-N``)."""
        found: list[str] = []
        for topic in self.options.topics:
            found.extend(self.client.get_topic_partitions(topic))
        return sorted(dict.fromkeys(found))

    def last_positions(self, partitions: Sequence[str]) -> dict[str, Position]:
        return {p: self.last_position(p) for p in partitions}

    def last_position(self, partition: str) -> Position:
        """The partition's last stored message (``NOTHING`` if it has none)."""
        scheme, rest = partition.split("://", 1)
        path = "/".join(urllib.parse.quote(part, safe="") for part in rest.split("/"))
        url = f"{self.options.admin_url}/admin/v2/{scheme}/{path}/lastMessageId"
        try:
            request = urllib.request.Request(url, headers=self.options.security.http_headers())
            with urllib.request.urlopen(request, timeout=30) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return NOTHING
            raise
        if int(body["entryId"]) < 0:
            return NOTHING
        return Position(
            int(body["ledgerId"]), int(body["entryId"]), int(body.get("batchIndex", -1))
        )

    def read_ahead(
        self, partition: str, start: Position, last: Position, count: int
    ) -> tuple[Position, int]:
        """The position of the ``count``-th message after ``start`` (not past ``last``), and
        how many messages that is (fewer if ``last`` comes first)."""
        if self.options.client is ClientKind.LEAN:
            timeout = self.options.read_timeout_ms
            return count_ahead(self.wire, partition, start, last, count, timeout)
        reader = self.client.create_reader(
            partition, _reader_start(partition, start), start_message_id_inclusive=True
        )
        reached, read = start, 0
        try:
            while read < count and not (reached != start and reaches(reached, last)):
                try:
                    message = reader.read_next(self.options.read_timeout_ms)
                except pulsar.Timeout:
                    break
                position = Position.of(message.message_id())
                if not is_after(position, start):
                    continue
                if not is_through(position, last):
                    break
                reached = position
                read += 1
        finally:
            reader.close()
        return reached, read


def _ranges(
    options: SourceOptions, start: Mapping[str, Position], end: Mapping[str, Position]
) -> list[TopicRange]:
    ranges = []
    for partition in sorted(end):
        first, last = start.get(partition, NOTHING), end[partition]
        if has_messages(first, last):
            ranges.append(
                TopicRange(
                    options.service_url,
                    partition,
                    _tuple(first),
                    _tuple(last),
                    options.read_timeout_ms,
                    options.security,
                    options.client,
                )
            )
    return ranges


class BatchReader(DataSourceReader):
    """``spark.read``: every partition from ``startingOffsets`` up to its last message."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = _Planner(self.options)
        try:
            partitions = planner.partitions()
            latest = planner.last_positions(partitions)
        finally:
            planner.close()
        start = starting_positions(self.options.starting_offsets, partitions, latest)
        ranges = _ranges(self.options, start, latest)
        return ranges or [TopicRange(self.options.service_url, "", _EMPTY, _EMPTY, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TopicRange)
        return read_partition(partition)


class StreamReader(DataSourceStreamReader):
    """``spark.readStream``: micro-batches of ``(previous end, latest]`` per partition."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: _Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_planner": None}

    @property
    def planner(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.options)
        return self._planner

    def initialOffset(self) -> Offset:  # noqa: N802 - Spark's names
        partitions = self.planner.partitions()
        latest = self.planner.last_positions(partitions)
        return encode(starting_positions(self.options.starting_offsets, partitions, latest))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:  # noqa: N802
        partitions = self.planner.partitions()
        begin = decode(start)
        begin.update({p: NOTHING for p in partitions if p not in begin})
        latest = self.planner.last_positions(partitions)
        if not isinstance(limit, ReadMaxRows):
            return encode({p: _later(begin[p], latest.get(p, NOTHING)) for p in begin})
        return encode(self._limited(begin, latest, int(limit.max_rows)))

    def _limited(
        self, begin: dict[str, Position], latest: Mapping[str, Position], budget: int
    ) -> dict[str, Position]:
        """Read ahead at most ``budget`` messages, shared fairly over partitions with data."""
        end = dict(begin)
        while budget > 0:
            active = [p for p in sorted(end) if p in latest and has_messages(end[p], latest[p])]
            if not active:
                break
            used = 0
            for partition, quota in share(budget, active).items():
                if quota == 0:
                    continue
                end[partition], read = self.planner.read_ahead(
                    partition, end[partition], latest[partition], quota
                )
                used += read
            if used == 0:
                break
            budget -= used
        return end

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        return _ranges(self.options, decode(start), decode(end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TopicRange)
        return read_partition(partition)

    def commit(self, end: Offset) -> None:
        """Nothing to release: the source keeps no subscription on the broker."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()


def _later(start: Position, latest: Position) -> Position:
    return latest if has_messages(start, latest) else start


# --- executor side -----------------------------------------------------------------------
_EMPTY = (-1, -1, -1)


def read_partition(spec: TopicRange) -> Iterator[Any]:
    """One planned range, in log order (runs in a Spark task): Arrow record batches on
    the lean client, rows on the official one."""
    if spec.client is ClientKind.OFFICIAL:
        return read_range(spec)
    if not spec.topic:
        return iter(())
    return read_arrow_range(
        spec.service_url,
        spec.security,
        spec.topic,
        Position(*spec.start),
        Position(*spec.end),
        spec.read_timeout_ms,
        arrow_schema(),
    )


def read_range(spec: TopicRange) -> Iterator[tuple[Any, ...]]:
    """The rows of one planned range with the official client, in log order."""
    if not spec.topic:
        return
    start, end = Position(*spec.start), Position(*spec.end)
    client = pulsar.Client(
        spec.service_url, logger=logging.getLogger("pulsar"), **spec.security.client_kwargs()
    )
    try:
        reader = client.create_reader(
            spec.topic, _reader_start(spec.topic, start), start_message_id_inclusive=True
        )
        try:
            last: Position | None = None
            while last is None or not reaches(last, end):
                try:
                    message = reader.read_next(spec.read_timeout_ms)
                except pulsar.Timeout as exc:
                    if last is not None and end.batch_index < 0 and is_through(last, end):
                        return  # the end named a whole entry, and it was read
                    raise ReadError(
                        f"{spec.topic}: no message after {last or start} within "
                        f"{spec.read_timeout_ms} ms, before the planned end {end}"
                    ) from exc
                position = Position.of(message.message_id())
                if not is_after(position, start):
                    continue
                if not is_through(position, end):
                    return
                last = position
                yield _row(spec.topic, position, message)
        finally:
            reader.close()
    finally:
        client.close()


def _reader_start(topic: str, start: Position) -> pulsar.MessageId:
    if start.is_before_everything:
        return pulsar.MessageId.earliest
    # The start of the entry, inclusively: the rows up to ``start`` are skipped by position,
    # so a start inside a batch is exact whatever the broker does with batch indexes.
    return start.entry_start(partition_index(topic))


def _row(topic: str, position: Position, message: pulsar.Message) -> tuple[Any, ...]:
    event_ms = message.event_timestamp()
    return (
        message.partition_key() or None,
        message.data(),
        dict(message.properties()),
        _timestamp(message.publish_timestamp()),
        _timestamp(event_ms) if event_ms else None,
        str(position),
        message.producer_name(),
        topic,
        partition_index(topic),
    )


def _timestamp(millis: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC)


def _tuple(position: Position) -> tuple[int, int, int]:
    return (position.ledger_id, position.entry_id, position.batch_index)
