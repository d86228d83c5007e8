"""Executor side of the sink on the lean client: one Spark partition's Arrow batches
published as whole batch entries.

The same producer names, sequence ids, partitions and checks as the row-by-row path
(``connectors.sink_writer``), computed a column at a time: each batch's rows are grouped
by (producer name, topic partition), every group's rows at or below the producer's last
stored sequence id are skipped (counted, not sent), and the rest are encoded into batch
entries (``connectors.arrow_entries``) that an ``EntryProducer`` sends and, after a
reconnect, resends with the same ids. The task either gets every row acknowledged (stored,
or recognised as a duplicate) or raises, so that Spark retries it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa

from connectors.arrow_columns import (
    key_partitions,
    message_columns,
    partition_values,
    producer_names,
    sequence_values,
)
from connectors.arrow_entries import Int64s, MessageColumns, batch_block, encode_records
from connectors.datasource_offsets import qualify
from connectors.sink_ids import (
    MAX_ROWS_PER_PARTITION,
    ROW_BITS,
    batch_sequence_id,
    partition_producer_name,
    spark_partition_route,
)
from connectors.sink_options import (
    Routing,
    SinkDataError,
    SinkMode,
    SinkPublishError,
    WriterSpec,
)
from connectors.sink_writer import PartitionResult, acknowledgement_timeout, close_quietly
from connectors.wire import (
    EntryProducer,
    OutgoingEntry,
    ProducerCounts,
    WireClient,
    WireError,
    WireSettings,
)
from dedup_broker.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

T = TypeVar("T")

_CODECS = {"LZ4": pb.LZ4, "ZLIB": pb.ZLIB, "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}


@dataclass
class _Slot:
    producer: EntryProducer
    last_stored: int
    """The broker's last stored sequence id for this name on this partition (-1: none)."""
    last_sent: int = -1


@dataclass(frozen=True)
class _Group:
    """Rows of a batch for one (producer, partition); ``rows`` None: all of them."""

    name: str | None
    partition: int
    rows: Int64s | None


class ArrowPartitionWriter:
    """Publishes the Arrow batches of one Spark partition of one batch."""

    def __init__(self, spec: WriterSpec, spark_partition: int, client: WireClient) -> None:
        self.spec = spec
        self.spark_partition = spark_partition
        self.client = client
        self.partition_topics = _wire(lambda: client.partitions(qualify(spec.topic)))
        self.result = PartitionResult()
        settings = spec.producer
        self._max_messages = settings.batching_max_messages if settings.batching_enabled else 1
        self._compression = pb.NONE
        if settings.compression:
            codec = _CODECS.get(settings.compression.upper())
            if codec is None:
                raise ValueError(f"unknown compression {settings.compression!r}")
            self._compression = codec
        self._slots: dict[tuple[str | None, int], _Slot] = {}
        if spec.mode is SinkMode.SEQUENCE:
            try:
                batch_sequence_id(spec.batch_id, 0)
            except ValueError as exc:
                raise SinkDataError(str(exc)) from exc

    # --- per batch ------------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch) -> None:
        count = batch.num_rows
        if count == 0:
            return
        first_row = self.result.rows
        self.result.rows += count
        columns = message_columns(self.spec, batch)
        sequence_ids = self._sequence_ids(batch, first_row, count)
        for group in self._groups(batch, columns):
            if group.rows is None:
                self._publish(group, columns, sequence_ids)
            else:
                indexes = pa.array(group.rows)
                self._publish(
                    group,
                    columns.take(indexes),
                    None if sequence_ids is None else sequence_ids[group.rows],
                )

    def _sequence_ids(self, batch: pa.RecordBatch, first_row: int, count: int) -> Int64s | None:
        spec = self.spec
        if spec.mode is SinkMode.SEQUENCE:
            if first_row + count > MAX_ROWS_PER_PARTITION:
                raise SinkDataError(
                    f"row index {MAX_ROWS_PER_PARTITION} is outside "
                    f"0..{MAX_ROWS_PER_PARTITION - 1}: use more partitions (num_partitions)"
                )
            rows = np.arange(first_row, first_row + count, dtype=np.int64)
            ids: Int64s = (np.int64(spec.batch_id) << np.int64(ROW_BITS)) | rows
            return ids
        if spec.mode is SinkMode.COLUMNS:
            assert spec.sequence_index is not None
            return sequence_values(batch.column(spec.sequence_index))
        return None

    def _groups(self, batch: pa.RecordBatch, columns: MessageColumns) -> Iterator[_Group]:
        """The rows of each (producer name, partition), in their order in the batch."""
        spec = self.spec
        names: list[str | None]
        producer_of: Int64s | None = None
        if spec.mode is SinkMode.SEQUENCE:
            assert spec.name is not None
            names = [partition_producer_name(spec.name, self.spark_partition)]
        elif spec.mode is SinkMode.COLUMNS:
            assert spec.name is not None and spec.producer_index is not None
            found, producer_of = producer_names(batch.column(spec.producer_index), spec.name)
            names = list(found)
        else:
            if columns.keys is None or columns.keys.null_count:
                raise SinkDataError("key mode needs a non-null key in every row")
            names = [None]
        partition_of = self._routes(batch, columns)
        if producer_of is None and partition_of is None:
            yield _Group(names[0], self._only_partition(), None)
            return
        count = batch.num_rows
        producers = producer_of if producer_of is not None else np.zeros(count, np.int64)
        partitions = partition_of if partition_of is not None else np.zeros(count, np.int64)
        groups = producers * len(self.partition_topics) + partitions
        if (groups == groups[0]).all():
            yield _Group(names[int(producers[0])], int(partitions[0]), None)
            return
        order = np.argsort(groups, kind="stable")
        ordered = groups[order]
        bounds = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), count]
        for start, end in itertools.pairwise(bounds):
            rows = order[start:end]
            yield _Group(names[int(producers[rows[0]])], int(partitions[rows[0]]), rows)

    def _routes(self, batch: pa.RecordBatch, columns: MessageColumns) -> Int64s | None:
        """Each row's topic partition, or None when all rows go to one partition."""
        count = len(self.partition_topics)
        routing = self.spec.routing
        if count == 1 or routing is Routing.SPARK_PARTITION:
            return None
        if routing is Routing.KEY:
            if columns.keys is None:
                raise SinkDataError("routing by key needs a non-null key in every row")
            return key_partitions(columns.keys, count)
        if routing is Routing.COLUMN:
            assert self.spec.partition_index is not None
            return partition_values(batch.column(self.spec.partition_index), count)
        return None

    def _only_partition(self) -> int:
        count = len(self.partition_topics)
        return 0 if count == 1 else spark_partition_route(self.spark_partition, count)

    # --- per (producer, partition) ----------------------------------------------------------
    def _publish(self, group: _Group, columns: MessageColumns, ids: Int64s | None) -> None:
        slot = self._slot(group.name, group.partition)
        if ids is None:  # key mode: the producer numbers its messages itself
            start = slot.last_sent + 1
            ids = np.arange(start, start + len(columns.values), dtype=np.int64)
        else:
            if ids[0] <= slot.last_sent or (len(ids) > 1 and (np.diff(ids) <= 0).any()):
                raise SinkDataError(
                    f"sequence ids of producer {group.name!r} do not increase within the "
                    f"batch (after {slot.last_sent}): the producer and sequence columns "
                    "must identify each row and be sorted"
                )
            skipped = int(np.searchsorted(ids, slot.last_stored, side="right"))
            if skipped:
                self.result.skipped += skipped
                columns, ids = columns.slice(skipped), ids[skipped:]
        slot.last_sent = int(ids[-1]) if len(ids) else slot.last_sent
        if not len(ids):
            return
        records = encode_records(columns, ids.astype(np.uint64))
        limit = slot.producer.max_message_size
        if limit and records.largest() > limit:
            raise SinkDataError(f"a message of {records.largest()} bytes exceeds {limit} bytes")
        publish_time = int(time.time() * 1000)
        name = slot.producer.name
        for start, end in records.entry_ranges(
            self._max_messages, self.spec.producer.batching_max_bytes
        ):
            block = batch_block(
                name,
                int(ids[start]),
                int(ids[end - 1]),
                end - start,
                records.payload(start, end),
                self._compression,
                publish_time,
            )
            _send(
                slot.producer, OutgoingEntry(int(ids[start]), int(ids[end - 1]), end - start, block)
            )

    def _slot(self, name: str | None, partition: int) -> _Slot:
        slot = self._slots.get((name, partition))
        if slot is None:
            settings = self.spec.producer
            producer = _wire(
                lambda: EntryProducer.create(
                    self.client,
                    self.partition_topics[partition],
                    name,
                    max_pending_messages=settings.max_pending_messages,
                    send_timeout_ms=settings.send_timeout_ms,
                )
            )
            if name is None:  # key mode: no replay to recognise, ids go on from the last
                slot = _Slot(producer, last_stored=-1, last_sent=producer.last_sequence_id)
            else:
                slot = _Slot(producer, last_stored=producer.last_sequence_id)
            self._slots[(name, partition)] = slot
        return slot

    # --- end of the partition -----------------------------------------------------------------
    def finish(self) -> PartitionResult:
        """Wait until every row is acknowledged; raise if any was not."""
        timeout = acknowledgement_timeout(self.spec.producer)
        for slot in self._slots.values():
            counts = _flush(slot.producer, timeout)
            self.result.stored += counts.stored
            self.result.duplicates += counts.duplicates
        return self.result

    def close(self) -> None:
        close_quietly(slot.producer for slot in self._slots.values())
        self._slots.clear()


def write_arrow_partition(
    spec: WriterSpec, spark_partition: int, batches: Iterable[pa.RecordBatch]
) -> PartitionResult:
    """Publish every row of one partition, or raise (the task fails and Spark retries)."""
    client = WireClient(spec.service_url, WireSettings.from_options(dict(spec.client_options)))
    try:
        writer = ArrowPartitionWriter(spec, spark_partition, client)
        try:
            for batch in batches:
                writer.write(batch)
            return writer.finish()
        finally:
            writer.close()
    finally:
        client.close()


def _send(producer: EntryProducer, entry: OutgoingEntry) -> None:
    _wire(lambda: producer.send(entry))


def _flush(producer: EntryProducer, timeout: float | None) -> ProducerCounts:
    return _wire(lambda: producer.flush(timeout))


def _wire(call: Callable[[], T]) -> T:
    """``call``, its wire failures raised as ``SinkPublishError`` (Spark retries the task)."""
    try:
        return call()
    except WireError as exc:
        raise SinkPublishError(str(exc)) from exc
