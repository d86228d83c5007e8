"""Pulsar batch entries built straight from Arrow columns, a whole column at a time.

A batch entry's payload is a run of records, one per message::

    [metadataSize:4][SingleMessageMetadata][payload]

Each record's ``SingleMessageMetadata`` is protobuf, written here column-wise: every field
of every row is a binary column (its tag, then a varint or a length and bytes), built with
numpy and joined row by row by Arrow's ``binary_join_element_wise``; an absent field is a
null, which adds nothing to its row. Fields go out in field-number order, as protobuf's own encoder
writes them: ``properties`` (1), ``partition_key`` (2), ``payload_size`` (3),
``event_time`` (5), ``sequence_id`` (8). The joined records of a batch lie back to back
in one Arrow buffer, so an entry's payload is a slice of it, and its metadata
(``MessageMetadata``, one protobuf message per entry) carries the first and the highest
sequence id, the range PIP-6 deduplicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from dedup_broker.protocol import compress, encode_message
from dedup_broker.protocol import pulsar_api_pb2 as pb

UInt64s = npt.NDArray[np.uint64]
Int64s = npt.NDArray[np.int64]

# Tags: (field number << 3) | wire type (0 varint, 2 length-delimited).
PROPERTY_TAG = 0x0A  # SingleMessageMetadata.properties (1), KeyValue.key (1)
PARTITION_KEY_TAG = 0x12  # SingleMessageMetadata.partition_key (2), KeyValue.value (2)
PAYLOAD_SIZE_TAG = 0x18  # SingleMessageMetadata.payload_size (3)
EVENT_TIME_TAG = 0x28  # SingleMessageMetadata.event_time (5)
SEQUENCE_ID_TAG = 0x40  # SingleMessageMetadata.sequence_id (8)
KEY_VALUE_KEY_TAG = 0x0A
KEY_VALUE_VALUE_TAG = 0x12

_MAX_VARINT_BYTES = 10


@dataclass(frozen=True)
class MessageColumns:
    """The messages of some rows, as Arrow arrays of one length (binary, utf-8 text)."""

    values: pa.Array
    """Binary payloads; a null is an empty payload."""
    keys: pa.Array | None = None
    """Partition keys; a null is no key."""
    properties: pa.Array | None = None
    """Each row's properties, already encoded as ``properties`` fields (null: none)."""
    event_times: UInt64s | None = None
    """Epoch milliseconds; 0 is no event time."""

    def take(self, indexes: pa.Array) -> MessageColumns:
        """The rows at ``indexes``, in that order."""
        return MessageColumns(
            values=self.values.take(indexes),
            keys=None if self.keys is None else self.keys.take(indexes),
            properties=None if self.properties is None else self.properties.take(indexes),
            event_times=None
            if self.event_times is None
            else self.event_times[indexes.to_numpy(zero_copy_only=False)],
        )

    def slice(self, start: int) -> MessageColumns:
        """The rows from ``start`` on."""
        return MessageColumns(
            values=self.values.slice(start),
            keys=None if self.keys is None else self.keys.slice(start),
            properties=None if self.properties is None else self.properties.slice(start),
            event_times=None if self.event_times is None else self.event_times[start:],
        )


@dataclass(frozen=True)
class Records:
    """Encoded records back to back: record ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    data: pa.Buffer
    offsets: Int64s

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def largest(self) -> int:
        """The size of the largest record, in bytes."""
        return int(np.diff(self.offsets).max()) if len(self) else 0

    def payload(self, start: int, end: int) -> bytes:
        """The batch payload of records ``start`` to ``end`` (exclusive)."""
        payload: bytes = self.data.slice(
            int(self.offsets[start]), int(self.offsets[end] - self.offsets[start])
        ).to_pybytes()
        return payload

    def entry_ranges(self, max_messages: int, max_bytes: int) -> list[tuple[int, int]]:
        """Consecutive ``(start, end)`` ranges of at most ``max_messages`` records and
        ``max_bytes`` bytes (a single larger record gets a range of its own)."""
        offsets = self.offsets
        ranges: list[tuple[int, int]] = []
        start, count = 0, len(self)
        while start < count:
            end = min(count, start + max(1, max_messages))
            fits = int(np.searchsorted(offsets, offsets[start] + max_bytes, side="right")) - 1
            end = max(start + 1, min(end, fits))
            ranges.append((start, end))
            start = end
        return ranges


def encode_records(columns: MessageColumns, sequence_ids: UInt64s) -> Records:
    """Every row's record (metadata size, ``SingleMessageMetadata``, payload)."""
    values = columns.values
    sizes = _lengths(values)
    parts: list[pa.Array] = []
    if columns.properties is not None:
        parts.append(columns.properties)
    if columns.keys is not None:
        parts.append(tagged_bytes(PARTITION_KEY_TAG, columns.keys))
    parts.append(tagged_varints(PAYLOAD_SIZE_TAG, sizes.astype(np.uint64)))
    if columns.event_times is not None:
        parts.append(
            _nulls_where_zero(
                tagged_varints(EVENT_TIME_TAG, columns.event_times), columns.event_times
            )
        )
    parts.append(tagged_varints(SEQUENCE_ID_TAG, sequence_ids))
    metadata = concat(*parts)
    size_prefix = _fixed_width(_lengths(metadata).astype(">u4").view(np.uint8), 4)
    records = concat(size_prefix, metadata, values)
    return Records(records.buffers()[2], binary_offsets(records))


def concat(*arrays: pa.Array) -> pa.Array:
    """Row by row, the arrays' values one after the other; a null adds nothing.

    (Nulls are replaced by empty values rather than skipped: Arrow's "skip" drops a row
    whose values are all null.)"""
    return pc.binary_join_element_wise(*arrays, b"", null_handling="replace", null_replacement="")


def binary_offsets(array: pa.Array) -> Int64s:
    """The ``len + 1`` offsets of a binary (or large binary) array into its data buffer."""
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    raw = np.frombuffer(array.buffers()[1], dtype=width)
    return raw[array.offset : array.offset + len(array) + 1].astype(np.int64)


def batch_block(
    producer_name: str,
    first_sequence_id: int,
    highest_sequence_id: int,
    messages: int,
    payload: bytes,
    compression: pb.CompressionType,
    publish_time_ms: int,
) -> bytes:
    """The message block of one batch entry (checksum, ``MessageMetadata``, payload)."""
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=first_sequence_id,
        publish_time=publish_time_ms,
        num_messages_in_batch=messages,
        highest_sequence_id=highest_sequence_id,
        uncompressed_size=len(payload),
    )
    if compression != pb.NONE:
        metadata.compression = compression
        payload = compress(compression, payload)
    return encode_message(metadata, payload)


# --- protobuf fields, a column at a time --------------------------------------------------
def tagged_varints(tag: int, values: UInt64s) -> pa.Array:
    """Each row: ``tag`` then the row's value as a varint (7 bits a byte, low bits first,
    the high bit set on every byte but the last)."""
    values = np.asarray(values, dtype=np.uint64)
    lengths = np.ones(len(values), dtype=np.int64)
    for k in range(1, _MAX_VARINT_BYTES):
        longer = values >= np.uint64(1 << (7 * k))
        if not longer.any():
            break
        lengths += longer
    width = int(lengths.max()) + 1 if len(values) else 1
    matrix = np.empty((len(values), width), dtype=np.uint8)
    matrix[:, 0] = tag
    for k in range(width - 1):
        group = ((values >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        matrix[:, k + 1] = group | ((lengths > k + 1).astype(np.uint8) << 7)
    kept = np.arange(width)[None, :] <= lengths[:, None]
    return _binary(lengths + 1, matrix[kept])


def tagged_bytes(tag: int, data: pa.Array) -> pa.Array:
    """Each row: ``tag``, the length as a varint, the bytes; null where ``data`` is."""
    return pc.binary_join_element_wise(
        tagged_varints(tag, _lengths(data).astype(np.uint64)), data, b""
    )


def key_value_fields(keys: pa.Array, values: pa.Array) -> pa.Array:
    """``properties`` fields (``KeyValue`` messages); null where the value is."""
    pairs = pc.binary_join_element_wise(
        tagged_bytes(KEY_VALUE_KEY_TAG, keys), tagged_bytes(KEY_VALUE_VALUE_TAG, values), b""
    )
    return tagged_bytes(PROPERTY_TAG, pairs)


def constant_key_value_fields(key: str, values: pa.Array) -> pa.Array:
    """``properties`` fields of one property name; null where the value is."""
    prefix = bytes(
        tagged_varints(KEY_VALUE_KEY_TAG, np.array([len(key.encode())], np.uint64))[0].as_py()
    )
    pairs = pc.binary_join_element_wise(
        pa.scalar(prefix + key.encode(), pa.binary()),
        tagged_bytes(KEY_VALUE_VALUE_TAG, values),
        b"",
    )
    return tagged_bytes(PROPERTY_TAG, pairs)


def _lengths(data: pa.Array) -> Int64s:
    """Byte lengths, 0 for nulls."""
    return np.asarray(
        pc.fill_null(pc.binary_length(data), 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )


def _nulls_where_zero(fields: pa.Array, values: UInt64s) -> pa.Array:
    return pc.if_else(pa.array(values != 0), fields, pa.scalar(None, pa.binary()))


def _binary(sizes: Int64s, data: npt.NDArray[np.uint8]) -> pa.Array:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.binary(),
        len(sizes),
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))],
    )


def _fixed_width(data: npt.NDArray[np.uint8], width: int) -> pa.Array:
    return _binary(np.full(len(data) // width, width, dtype=np.int64), data)
