"""The sink's columns taken from Arrow batches a whole column at a time: payloads, keys,
properties, event times, sequence ids, producer names and partition routes.

Each function gives the same answer as the row-by-row path (``connectors.sink_writer``
with ``connectors.sink_ids``) gives for every row, and refuses the same data with the
same ``SinkDataError``; where Arrow has no kernel for a case (non-ASCII keys to hash,
timestamps without a time zone), the rows concerned go through that path's functions.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.arrow_entries import (
    Int64s,
    MessageColumns,
    UInt64s,
    binary_offsets,
    concat,
    constant_key_value_fields,
    key_value_fields,
)
from connectors.sink_ids import MAX_SEQUENCE_ID, column_producer_name, key_partition
from connectors.sink_options import SinkDataError, WriterSpec

_U32 = np.uint64(0xFFFFFFFF)
_MILLIS_SCALE = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}
"""Timestamp unit -> (multiplier, divisor) to epoch milliseconds."""


def message_columns(spec: WriterSpec, batch: pa.RecordBatch) -> MessageColumns:
    """Payloads, keys, properties and event times of a batch's rows, as ``spec`` says."""
    keys = None if spec.key_index is None else text(batch.column(spec.key_index), "key")
    properties: list[pa.Array] = []
    if spec.properties_map_index is not None:
        properties.append(map_properties(batch.column(spec.properties_map_index)))
    for name, index in spec.property_indexes:
        properties.append(constant_key_value_fields(name, text(batch.column(index), name)))
    return MessageColumns(
        values=payloads(batch.column(spec.value_index)),
        keys=keys,
        properties=None if not properties else concat(*properties),
        event_times=None
        if spec.event_time_index is None
        else event_millis(batch.column(spec.event_time_index)),
    )


def payloads(array: pa.Array) -> pa.Array:
    """Binary or string values as binary (nulls stay nulls: empty payloads)."""
    kind = array.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return array.cast(pa.binary())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return array.cast(pa.string()).cast(pa.binary())
    raise SinkDataError(f"value must be binary or string, not {kind}")


def text(array: pa.Array, what: str) -> pa.Array:
    """A key or a property as utf-8 bytes: strings as they are, binary decoded (it must be
    utf-8), integers in decimal, anything else as Python's ``str`` writes it."""
    kind = array.type
    try:
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return array.cast(pa.string()).cast(pa.binary())
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return array.cast(pa.string()).cast(pa.binary())
        if pa.types.is_integer(kind):
            return array.cast(pa.string()).cast(pa.binary())
    except pa.ArrowInvalid as exc:
        raise SinkDataError(f"{what} is not valid utf-8 text: {exc}") from exc
    return pa.array(
        [None if v is None else str(v).encode() for v in array.to_pylist()], pa.binary()
    )


def map_properties(array: pa.Array) -> pa.Array:
    """A map column as each row's ``properties`` fields; entries with a null value are
    left out, as is a null map."""
    if not isinstance(array, pa.MapArray):
        raise SinkDataError(f"properties must be a map, not {array.type}")
    offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys = text(array.keys.slice(first, last - first), "property name")
    values = text(array.items.slice(first, last - first), "property value")
    fields = key_value_fields(keys, values)
    present = np.asarray(fields.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    kept = np.concatenate([[0], np.cumsum(present)])[offsets - first].astype(np.int32)
    lists = pa.ListArray.from_arrays(
        pa.array(kept), fields.filter(pa.array(present)), mask=array.is_null()
    )
    return pc.binary_join(lists, b"")


def event_millis(array: pa.Array) -> UInt64s:
    """Timestamps (or epoch milliseconds) as epoch milliseconds; 0 where null."""
    kind = array.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        raw = np.asarray(pc.fill_null(array.cast(pa.int64()), 0).to_numpy(), dtype=np.int64)
        multiplier, divisor = _MILLIS_SCALE[kind.unit]
        millis = raw * multiplier // divisor
    elif pa.types.is_timestamp(kind):  # wall-clock time: the local zone, as datetime does
        millis = np.array(
            [0 if v is None else int(_aware(v).timestamp() * 1000) for v in array.to_pylist()],
            dtype=np.int64,
        )
    elif pa.types.is_integer(kind):
        millis = np.asarray(pc.fill_null(array.cast(pa.int64()), 0).to_numpy(), dtype=np.int64)
    else:
        raise SinkDataError(f"event time must be a timestamp or epoch millis, not {kind}")
    if (millis < 0).any():
        raise SinkDataError("event time before 1970 (a negative epoch millisecond)")
    return millis.astype(np.uint64)


def sequence_values(array: pa.Array) -> Int64s:
    """A user column's values as sequence ids (non-negative longs, no nulls)."""
    if not pa.types.is_integer(array.type):
        raise SinkDataError(f"sequence column values of type {array.type} are not integers")
    if array.null_count:
        raise SinkDataError("sequence column value None is not an integer")
    values = np.asarray(array.cast(pa.int64()).to_numpy(), dtype=np.int64)
    if len(values) and (values.min() < 0 or values.max() > MAX_SEQUENCE_ID):
        raise SinkDataError(f"a sequence id is outside 0..{MAX_SEQUENCE_ID}")
    return values


def producer_names(array: pa.Array, name: str) -> tuple[list[str], Int64s]:
    """The distinct producer names of a producer column, and each row's index into them."""
    distinct = pc.unique(array)
    try:
        names = [column_producer_name(name, value) for value in distinct.to_pylist()]
    except ValueError as exc:
        raise SinkDataError(str(exc)) from exc
    indexes = pc.index_in(array, value_set=distinct)
    return names, np.asarray(indexes.to_numpy(zero_copy_only=False), dtype=np.int64)


def partition_values(array: pa.Array, partitions: int) -> Int64s:
    """A partition column's integers modulo the partition count (as Python's ``%``)."""
    if not pa.types.is_integer(array.type) or array.null_count:
        raise SinkDataError("partition column values must be integers, without nulls")
    values = np.asarray(array.cast(pa.int64()).to_numpy(), dtype=np.int64)
    routes: Int64s = values % partitions
    return routes


def key_partitions(keys: pa.Array, partitions: int) -> Int64s:
    """Each key's partition as Pulsar's Java clients route it: ``String.hashCode`` (over
    UTF-16 code units) & 0x7FFFFFFF, modulo the count. ASCII keys are hashed here at once
    (a UTF-16 unit is then the byte); any other key row by row."""
    if keys.null_count:
        raise SinkDataError("routing by key needs a non-null key in every row")
    offsets = binary_offsets(keys)
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8)[first:last].astype(np.uint64)
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if len(lengths) else 0
    powers = np.ones(max(longest, 1), dtype=np.uint64)
    for i in range(1, longest):
        powers[i] = (powers[i - 1] * np.uint64(31)) & _U32
    ends = np.repeat(offsets[1:] - first, lengths)
    exponents = ends - 1 - np.arange(last - first)
    sums = np.concatenate([[np.uint64(0)], np.cumsum(data * powers[exponents], dtype=np.uint64)])
    starts = offsets - first
    hashes = (sums[starts[1:]] - sums[starts[:-1]]) & _U32
    result: Int64s = ((hashes & np.uint64(0x7FFFFFFF)) % np.uint64(partitions)).astype(np.int64)
    wide = np.concatenate([[0], np.cumsum(data >= 0x80)])
    for row in np.flatnonzero(wide[starts[1:]] > wide[starts[:-1]]):
        result[row] = key_partition(keys[int(row)].as_py().decode(), partitions)
    return result


def _aware(value: dt.datetime) -> dt.datetime:
    return value.astimezone() if value.tzinfo is None else value
