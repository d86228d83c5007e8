"""A Spark sink that publishes through the broker so that replays never duplicate.

``PulsarSink`` is a ``foreachBatch`` function (``df.writeStream.foreachBatch(sink)``) and
also writes plain DataFrames (``sink.write(df, batch_id)``). The driver prepares the
batch (a deterministic partitioning and order when asked, and a projection to the
columns the messages need); the executors publish it: by default Spark's Arrow batches as
whole batch entries with the connectors' own client (``mapInArrow`` and
``connectors.arrow_writer``), with ``client="official"`` row by row with the official
``pulsar-client`` (``DataFrame.rdd`` and ``connectors.sink_writer``). See docs/spark.md
for the modes and what the query must guarantee.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.arrow_writer import write_arrow_partition
from connectors.sink_ids import check_name
from connectors.sink_options import (
    ClientKind,
    ProducerSettings,
    Routing,
    SinkMode,
    WriterSpec,
)
from connectors.sink_writer import write_partition

ColumnLike = Any
"""A column name or a ``pyspark.sql.Column`` expression."""

VALUE = "__value"
KEY = "__key"
PRODUCER = "__producer"
SEQUENCE = "__sequence"
PARTITION = "__partition"
EVENT_TIME = "__event_time"
COUNT_NAMES = ("rows", "stored", "duplicates", "skipped")
COUNTS_SCHEMA = ", ".join(f"{name} long" for name in COUNT_NAMES)
"""What each ``mapInArrow`` task returns: its ``PartitionResult``."""


@dataclass(frozen=True)
class SinkResult:
    """One batch's outcome, summed over its tasks (successful attempts only)."""

    batch_id: int
    rows: int
    stored: int
    """Written by this run."""
    duplicates: int
    """Sent again and dropped by the broker (it already had them)."""
    skipped: int
    """Not sent: the broker's last stored sequence id for the producer was already past."""
    seconds: float

    @property
    def replayed(self) -> int:
        """Rows this run found already stored (an earlier attempt had written them)."""
        return self.duplicates + self.skipped


class PulsarSink:
    """Publish DataFrame rows as messages of one topic, effectively once.

    ``mode="sequence"`` (default): the producer of each row is ``{name}-{spark partition}``
    and its sequence id ``(batch_id << 32) | row index``; ``order_by`` (+
    ``num_partitions``) makes the partitioning and order deterministic when the batch's
    own are not. ``mode="columns"``: producer ``{name}-{producer_column}`` and sequence id
    ``sequence_column`` (e.g. the source's partition and offset). ``mode="key"``: no
    producer identity; ``key`` goes out as the partition key for key-window
    deduplication on the broker.
    """

    def __init__(
        self,
        service_url: str,
        topic: str,
        *,
        mode: str | SinkMode = SinkMode.SEQUENCE,
        name: str | None = None,
        value: ColumnLike | None = None,
        key: ColumnLike | None = None,
        producer_column: ColumnLike | None = None,
        sequence_column: ColumnLike | None = None,
        properties: Sequence[str] | Mapping[str, ColumnLike] = (),
        event_time: ColumnLike | None = None,
        routing: str | Routing = Routing.AUTO,
        partition_column: ColumnLike | None = None,
        order_by: Sequence[ColumnLike] = (),
        num_partitions: int | None = None,
        producer: ProducerSettings | None = None,
        client_options: Mapping[str, Any] | None = None,
        client: str | ClientKind = ClientKind.LEAN,
    ) -> None:
        self.service_url = service_url
        self.topic = topic
        self.mode = SinkMode(mode)
        self.name = check_name(name) if name is not None else None
        self.value = value
        self.key = key
        self.producer_column = producer_column
        self.sequence_column = sequence_column
        self.properties: dict[str, ColumnLike] = (
            dict(properties) if isinstance(properties, Mapping) else {p: p for p in properties}
        )
        self.event_time = event_time
        self.routing = _resolve_routing(Routing(routing), key is not None)
        self.partition_column = partition_column
        self.order_by = tuple(order_by)
        self.num_partitions = num_partitions
        self.producer = producer or ProducerSettings()
        self.client_options = dict(client_options or {})
        self.client = ClientKind(client)
        self.last_result: SinkResult | None = None
        self._validate()

    def _validate(self) -> None:
        if self.mode is not SinkMode.KEY and self.name is None:
            raise ValueError(
                f"mode {self.mode.value!r} needs a stable name= (the producer-name prefix): "
                "the same on every restart, unique among writers of the topic"
            )
        if self.mode is SinkMode.COLUMNS and (
            self.producer_column is None or self.sequence_column is None
        ):
            raise ValueError("mode 'columns' needs producer_column= and sequence_column=")
        if self.mode is SinkMode.KEY and self.key is None:
            raise ValueError("mode 'key' needs key=")
        if self.routing is Routing.COLUMN and self.partition_column is None:
            raise ValueError("routing 'column' needs partition_column=")
        if self.routing is Routing.KEY and self.key is None:
            raise ValueError("routing 'key' needs key=")
        if self.num_partitions is not None and self.num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")

    # --- entry points ----------------------------------------------------------------
    def __call__(self, df: Any, batch_id: int) -> SinkResult:
        """``foreachBatch`` entry point."""
        return self.write(df, batch_id)

    def write(self, df: Any, batch_id: int = 0) -> SinkResult:
        """Publish every row of ``df``; raises (Spark's job error) if any row failed.

        For a plain DataFrame, ``batch_id`` plays the micro-batch id's role: use a new,
        higher one for each new run of data, and the same one to re-run the same data.
        """
        started = time.monotonic()
        prepared = self._prepare(df)
        projected, spec = self._project(prepared, batch_id)
        if self.client is ClientKind.LEAN:
            counts = projected.mapInArrow(_arrow_task(spec), COUNTS_SCHEMA).collect()
        else:
            counts = projected.rdd.mapPartitionsWithIndex(_task(spec)).collect()
        rows, stored, duplicates, skipped = (sum(c[i] for c in counts) for i in range(4))
        result = SinkResult(
            batch_id, rows, stored, duplicates, skipped, seconds=time.monotonic() - started
        )
        self.last_result = result
        return result

    # --- driver-side preparation ------------------------------------------------------
    def _prepare(self, df: Any) -> Any:
        """A partitioning and order that a replay of the same data reproduces."""
        if self.mode is SinkMode.COLUMNS:
            producer, sequence = _col(self.producer_column), _col(self.sequence_column)
            count = self.num_partitions or _shuffle_partitions(df)
            return df.repartition(count, producer).sortWithinPartitions(producer, sequence)
        if self.order_by:
            columns = [_col(c) for c in self.order_by]
            count = self.num_partitions or _shuffle_partitions(df)
            return df.repartition(count, *columns).sortWithinPartitions(*columns)
        if self.num_partitions is not None:
            raise ValueError("num_partitions needs order_by= (a deterministic repartition)")
        return df

    def _project(self, df: Any, batch_id: int) -> tuple[Any, WriterSpec]:
        from pyspark.sql import functions as f

        columns: list[Any] = []

        def add(expression: Any, alias: str) -> int:
            columns.append(expression.alias(alias))
            return len(columns) - 1

        if self.value is not None:
            value_expression = _col(self.value)
        elif "value" in df.columns:
            value_expression = f.col("value")
        else:
            value_expression = f.to_json(f.struct(*[f.col(c) for c in df.columns]))
        value_index = add(value_expression, VALUE)
        key_index = add(_col(self.key), KEY) if self.key is not None else None
        producer_index = sequence_index = None
        if self.mode is SinkMode.COLUMNS:
            producer_index = add(_col(self.producer_column), PRODUCER)
            sequence_index = add(_col(self.sequence_column).cast("long"), SEQUENCE)
        partition_index = None
        if self.routing is Routing.COLUMN:
            partition_index = add(_col(self.partition_column).cast("long"), PARTITION)
        event_time_index = (
            add(_col(self.event_time), EVENT_TIME) if self.event_time is not None else None
        )
        property_indexes = tuple(
            (prop, add(_col(expression).cast("string"), f"__prop_{i}"))
            for i, (prop, expression) in enumerate(self.properties.items())
        )
        spec = WriterSpec(
            service_url=self.service_url,
            topic=self.topic,
            mode=self.mode,
            name=self.name,
            batch_id=batch_id,
            routing=self.routing,
            value_index=value_index,
            key_index=key_index,
            producer_index=producer_index,
            sequence_index=sequence_index,
            partition_index=partition_index,
            event_time_index=event_time_index,
            property_indexes=property_indexes,
            producer=self.producer,
            client_options=tuple(self.client_options.items()),
            client=self.client,
        )
        return df.select(*columns), spec


def _task(
    spec: WriterSpec,
) -> Callable[[int, Iterator[Any]], Iterator[tuple[int, int, int, int]]]:
    def run(spark_partition: int, rows: Iterator[Any]) -> Iterator[tuple[int, int, int, int]]:
        first = next(rows, None)
        if first is None:
            yield (0, 0, 0, 0)
            return
        yield write_partition(spec, spark_partition, _chain(first, rows)).as_tuple()

    return run


def _arrow_task(spec: WriterSpec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        first = next((batch for batch in batches if batch.num_rows), None)
        counts = (0, 0, 0, 0)
        if first is not None:
            counts = write_arrow_partition(spec, partition, _chain(first, batches)).as_tuple()
        yield pa.RecordBatch.from_pydict(
            {name: [value] for name, value in zip(COUNT_NAMES, counts, strict=True)},
            schema=pa.schema([(name, pa.int64()) for name in COUNT_NAMES]),
        )

    return run


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _col(column: ColumnLike) -> Any:
    from pyspark.sql import functions as f

    return f.col(column) if isinstance(column, str) else column


def _shuffle_partitions(df: Any) -> int:
    return int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))


def _resolve_routing(routing: Routing, has_key: bool) -> Routing:
    if routing is Routing.AUTO:
        return Routing.KEY if has_key else Routing.SPARK_PARTITION
    return routing
