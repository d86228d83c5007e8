"""Writing side of the ``dedup-broker`` Spark data source (``df.write`` / ``writeStream``).

The same publishing code as ``connectors.sink.PulsarSink``: Spark's Arrow batches published
as whole batch entries by the lean client (``connectors.arrow_writer``, the default), or
rows through the official client (``connectors.sink_writer``, option ``client`` =
``official``); with the same producer names and sequence ids either way, so that the
broker's deduplication stores each row once however often Spark replays a task or a
micro-batch. In ``sequence`` mode a
task publishes as ``{name}-{Spark partition}`` with sequence ids
``(batch_id << 32) | row index``; the batch id is the micro-batch's (Spark hands it to the
tasks as the local property ``streaming.sql.batchId``), or the ``batchId`` option for
``df.write``. Unlike ``PulsarSink`` the data source cannot repartition its input: the
rows must reach the writer in an order a replay reproduces (see docs/spark.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import MapType, StructType

from connectors.arrow_writer import write_arrow_partition
from connectors.client_security import ClientSecurity
from connectors.sink_ids import check_name
from connectors.sink_options import (
    ClientKind,
    ProducerSettings,
    Routing,
    SinkDataError,
    SinkMode,
    WriterSpec,
)
from connectors.sink_writer import write_partition

log = logging.getLogger(__name__)

T = TypeVar("T")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property Structured Streaming sets on the jobs of a micro-batch."""


@dataclass
class WriteCounts(WriterCommitMessage):
    """One task's outcome (as ``connectors.sink_writer.PartitionResult``)."""

    partition: int
    rows: int
    stored: int
    duplicates: int
    skipped: int


def writer_spec(options: Mapping[str, str], schema: StructType) -> WriterSpec:
    """The publishing plan from the data source's options; row positions are the schema's."""

    def get(name: str) -> str | None:
        value = options.get(name)
        return None if value is None or value == "" else str(value)

    fields = list(schema.fieldNames())

    def index(option: str, default: str | None = None, *, required: bool = False) -> int | None:
        name = get(option)
        if name is None:
            if default is not None and default in fields:
                return fields.index(default)
            if required:
                raise ValueError(f"the option {option!r} is needed")
            return None
        if name not in fields:
            raise ValueError(f"{option}={name!r}: no such column in {fields}")
        return fields.index(name)

    service_url, topic = get("serviceUrl"), get("topic")
    if service_url is None or topic is None:
        raise ValueError("the options 'serviceUrl' and 'topic' are needed")
    mode = SinkMode(get("mode") or SinkMode.SEQUENCE.value)
    name = get("name")
    if mode is not SinkMode.KEY:
        if name is None:
            raise ValueError(
                f"mode {mode.value!r} needs the option 'name' (the producer-name prefix): "
                "the same on every restart, unique among writers of the topic"
            )
        check_name(name)
    value_index = index("valueColumn", "value")
    if value_index is None:
        raise ValueError(f"no 'value' column (or option valueColumn) in {fields}")
    key_index = index("keyColumn", "key")
    producer_index = sequence_index = None
    if mode is SinkMode.COLUMNS:
        producer_index = index("producerColumn", required=True)
        sequence_index = index("sequenceColumn", required=True)
    if mode is SinkMode.KEY and key_index is None:
        raise ValueError("mode 'key' needs a key column ('key' or option keyColumn)")
    routing = Routing(get("routing") or Routing.AUTO.value)
    if routing is Routing.AUTO:
        routing = Routing.KEY if key_index is not None else Routing.SPARK_PARTITION
    partition_index = index("partitionColumn")
    if routing is Routing.COLUMN and partition_index is None:
        raise ValueError("routing 'column' needs the option partitionColumn")
    if routing is Routing.KEY and key_index is None:
        raise ValueError("routing 'key' needs a key column")
    properties_index = index("propertiesColumn", "properties")
    if properties_index is not None and not isinstance(
        schema.fields[properties_index].dataType, MapType
    ):
        raise ValueError(f"column {fields[properties_index]!r} (properties) must be a map")
    defaults = ProducerSettings()
    producer = ProducerSettings(
        batching_enabled=(get("batchingEnabled") or "true").lower() == "true",
        batching_max_messages=int(get("batchingMaxMessages") or defaults.batching_max_messages),
        batching_max_publish_delay_ms=int(
            get("batchingMaxPublishDelayMs") or defaults.batching_max_publish_delay_ms
        ),
        max_pending_messages=int(get("maxPendingMessages") or defaults.max_pending_messages),
        send_timeout_ms=int(get("sendTimeoutMs") or defaults.send_timeout_ms),
        compression=get("compression"),
        batching_max_bytes=int(get("batchingMaxBytes") or defaults.batching_max_bytes),
    )
    return WriterSpec(
        service_url=service_url,
        topic=topic,
        mode=mode,
        name=name if mode is not SinkMode.KEY else None,
        batch_id=-1,
        routing=routing,
        value_index=value_index,
        key_index=key_index,
        producer_index=producer_index,
        sequence_index=sequence_index,
        partition_index=partition_index if routing is Routing.COLUMN else None,
        event_time_index=index("eventTimeColumn", "event_time"),
        properties_map_index=properties_index,
        producer=producer,
        client_options=tuple(
            (name, value)
            for name, value in dataclasses.asdict(ClientSecurity.from_options(get)).items()
            if value
        ),
        client=ClientKind(get("client") or ClientKind.LEAN.value),
    )


def _task_spec(spec: WriterSpec, batch_id: int | None) -> tuple[int, WriterSpec]:
    """The task's Spark partition, and the spec with the batch id (sequence mode)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    if spec.mode is SinkMode.SEQUENCE:
        if batch_id is None:
            text = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
            if text is None:
                raise SinkDataError(
                    f"no micro-batch id ({BATCH_ID_PROPERTY}) in the task: sequence mode "
                    "cannot give replayed rows their earlier sequence ids"
                )
            batch_id = int(text)
        spec = dataclasses.replace(spec, batch_id=batch_id)
    return partition, spec


def _write_task(spec: WriterSpec, rows: Iterator[Any], batch_id: int | None) -> WriteCounts:
    partition, spec = _task_spec(spec, batch_id)
    first = next(rows, None)
    if first is None:
        return WriteCounts(partition, 0, 0, 0, 0)
    result = write_partition(spec, partition, _chain(first, rows))
    return WriteCounts(partition, *result.as_tuple())


def _write_arrow_task(
    spec: WriterSpec, batches: Iterator[pa.RecordBatch], batch_id: int | None
) -> WriteCounts:
    partition, spec = _task_spec(spec, batch_id)
    first = next((batch for batch in batches if batch.num_rows), None)
    if first is None:
        return WriteCounts(partition, 0, 0, 0, 0)
    result = write_arrow_partition(spec, partition, _chain(first, batches))
    return WriteCounts(partition, *result.as_tuple())


def _chain(first: T, rest: Iterator[T]) -> Iterator[T]:
    yield first
    yield from rest


def _log_commit(
    kind: str, messages: list[WriterCommitMessage | None], batch_id: int | None
) -> None:
    done = [m for m in messages if isinstance(m, WriteCounts)]
    log.info(
        "%s batch %s: %d rows, %d stored, %d duplicates, %d skipped",
        kind,
        batch_id,
        sum(m.rows for m in done),
        sum(m.stored for m in done),
        sum(m.duplicates for m in done),
        sum(m.skipped for m in done),
    )


class BatchWriter(DataSourceWriter):
    """``df.write``: sequence mode takes its batch id from the ``batchId`` option."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.spec = writer_spec(options, schema)
        raw = options.get("batchId")
        self.batch_id = int(raw) if raw not in (None, "") else None
        if self.spec.mode is SinkMode.SEQUENCE and self.batch_id is None:
            raise ValueError(
                "df.write in sequence mode needs the option 'batchId': higher for every new "
                "set of data, the same to re-run the same data"
            )

    def write(self, iterator: Iterator[Any]) -> WriteCounts:
        return _write_task(self.spec, iterator, self.batch_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit("write", messages, self.batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit("aborted write", messages, self.batch_id)


class ArrowBatchWriter(BatchWriter, DataSourceArrowWriter):
    """``df.write`` on the lean client: Spark's Arrow batches, published a batch at a time."""

    def write(self, iterator: Iterator[Any]) -> WriteCounts:
        return _write_arrow_task(self.spec, iterator, self.batch_id)


class StreamWriter(DataSourceStreamWriter):
    """``writeStream``: sequence mode takes the micro-batch id from the task."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.spec = writer_spec(options, schema)

    def write(self, iterator: Iterator[Any]) -> WriteCounts:
        return _write_task(self.spec, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _log_commit("micro", messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        # Rows already stored stay; the replay of this batch is recognised as duplicates.
        _log_commit("aborted micro", messages, batchId)


class ArrowStreamWriter(StreamWriter, DataSourceStreamArrowWriter):
    """``writeStream`` on the lean client: Spark's Arrow batches, a batch at a time."""

    def write(self, iterator: Iterator[Any]) -> WriteCounts:
        return _write_arrow_task(self.spec, iterator, None)
