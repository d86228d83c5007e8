"""Whole entries of a topic partition turned into the source's Arrow record batches.

An entry is a message block as the producer sent it: ``MessageMetadata`` once for the
entry (producer, publish time, codec, message count), then, for a batch, one record per
message (``SingleMessageMetadata`` and payload). Entry-wide columns (producer name,
publish time, ledger and entry ids) are repeated by numpy; per message, one small
protobuf parse yields the key, properties and event time, and the payload is sliced out.
Which messages of an entry belong to a planned range ``(start, end]`` follows from the
entry's position alone (``message_span``), so only the range's first and last entries
are cut.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.positions import Position
from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import decompress, is_batch, parse_message
from dedup_broker.protocol import pulsar_api_pb2 as pb

_SIZE = struct.Struct(">I")
_STRING = pa.string()


def message_span(
    ledger_id: int, entry_id: int, count: int, start: Position, end: Position
) -> tuple[int, int]:
    """The batch indexes ``[first, stop)`` of an entry's ``count`` messages that lie after
    ``start`` and at or before ``end`` (batch index -1 names a whole entry)."""
    here = (ledger_id, entry_id)
    first, stop = 0, count
    if not start.is_before_everything:
        start_entry = (start.ledger_id, start.entry_id)
        if here < start_entry:
            return 0, 0
        if here == start_entry:
            first = count if start.batch_index < 0 else start.batch_index + 1
    end_entry = (end.ledger_id, end.entry_id)
    if end.is_before_everything or here > end_entry:
        return 0, 0
    if here == end_entry and end.batch_index >= 0:
        stop = min(count, end.batch_index + 1)
    return first, max(first, stop)


def entry_message_count(metadata: pb.MessageMetadata) -> int:
    """How many messages an entry holds (what the broker charges permits for)."""
    return metadata.num_messages_in_batch if is_batch(metadata) else 1


@dataclass
class _Columns:
    """Column values gathered message by message until a record batch is built."""

    keys: list[str | None] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    property_offsets: list[int] = field(default_factory=lambda: [0])
    property_keys: list[str] = field(default_factory=list)
    property_values: list[str] = field(default_factory=list)
    event_times: list[int] = field(default_factory=list)
    batch_indexes: list[int] = field(default_factory=list)
    entry_ids: list[tuple[int, int]] = field(default_factory=list)
    """(ledger, entry) of each entry taken, with its count and metadata below."""
    entry_counts: list[int] = field(default_factory=list)
    publish_times: list[int] = field(default_factory=list)
    producers: list[str] = field(default_factory=list)


class SourceBatches:
    """Collects the messages of one partition's range from its entries, in log order."""

    def __init__(
        self, topic: str, partition: int, start: Position, end: Position, schema: pa.Schema
    ):
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.schema = schema
        self.rows = 0
        self.done = end.is_before_everything
        """True once the entry holding ``end`` (or a later one) has been added."""
        self._columns = _Columns()

    def add(self, ledger_id: int, entry_id: int, block: bytes) -> int:
        """Take an entry's messages that lie in the range; the entry's message count."""
        parsed = parse_message(block)
        if not parsed.checksum_valid:
            raise ProtocolError(f"{self.topic}: entry {ledger_id}:{entry_id} fails its checksum")
        metadata = parsed.metadata
        count = entry_message_count(metadata)
        if (ledger_id, entry_id) >= (self.end.ledger_id, self.end.entry_id):
            self.done = True
        first, stop = message_span(ledger_id, entry_id, count, self.start, self.end)
        if first >= stop:
            return count
        if metadata.encryption_keys:
            raise ProtocolError(f"{self.topic}: entry {ledger_id}:{entry_id} is encrypted")
        data = decompress(metadata.compression, parsed.payload, metadata.uncompressed_size)
        columns = self._columns
        if is_batch(metadata):
            self._add_records(data, first, stop)
        else:
            self._add_single(metadata, data)
        columns.entry_ids.append((ledger_id, entry_id))
        columns.entry_counts.append(stop - first)
        columns.publish_times.append(metadata.publish_time)
        columns.producers.append(metadata.producer_name)
        self.rows += stop - first
        return count

    def _add_single(self, metadata: pb.MessageMetadata, payload: bytes) -> None:
        columns = self._columns
        columns.keys.append(metadata.partition_key or None)
        columns.values.append(payload)
        for pair in metadata.properties:
            columns.property_keys.append(pair.key)
            columns.property_values.append(pair.value)
        columns.property_offsets.append(len(columns.property_keys))
        columns.event_times.append(metadata.event_time)
        columns.batch_indexes.append(-1)

    def _add_records(self, data: bytes, first: int, stop: int) -> None:
        columns = self._columns
        keys, values, events = columns.keys, columns.values, columns.event_times
        property_keys, property_values = columns.property_keys, columns.property_values
        offsets = columns.property_offsets
        parse = pb.SingleMessageMetadata.FromString
        unpack = _SIZE.unpack_from
        view = memoryview(data)
        position, end = 0, len(data)
        try:
            for index in range(stop):
                if end - position < 4:
                    raise ProtocolError(f"{self.topic}: a batch ends inside message {index}")
                (size,) = unpack(data, position)
                position += 4
                single = parse(view[position : position + size])  # type: ignore[arg-type]
                position += size
                length = single.payload_size
                if index >= first:
                    keys.append(single.partition_key or None)
                    values.append(data[position : position + length])
                    for pair in single.properties:
                        property_keys.append(pair.key)
                        property_values.append(pair.value)
                    offsets.append(len(property_keys))
                    events.append(single.event_time)
                position += length
        finally:
            view.release()
        columns.batch_indexes.extend(range(first, stop))

    def take(self) -> pa.RecordBatch:
        """The messages collected so far as one record batch (the source's schema)."""
        columns, self._columns = self._columns, _Columns()
        rows, self.rows = self.rows, 0
        counts = np.asarray(columns.entry_counts, dtype=np.int64)
        ledgers = np.repeat([e[0] for e in columns.entry_ids], counts)
        entries = np.repeat([e[1] for e in columns.entry_ids], counts)
        publish = np.repeat(np.asarray(columns.publish_times, dtype=np.int64) * 1000, counts)
        events = np.asarray(columns.event_times, dtype=np.int64) * 1000
        message_ids = pc.binary_join_element_wise(
            pa.array(ledgers).cast(_STRING),
            pa.array(entries).cast(_STRING),
            pa.array(columns.batch_indexes, pa.int64()).cast(_STRING),
            ":",
        )
        producers = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(columns.producers)), counts), pa.int32()),
            pa.array(columns.producers, _STRING),
        ).cast(_STRING)
        properties = pa.MapArray.from_arrays(
            pa.array(columns.property_offsets, pa.int32()),
            pa.array(columns.property_keys, _STRING),
            pa.array(columns.property_values, _STRING),
        )
        utc = self.schema.field("publish_time").type
        arrays = [
            pa.array(columns.keys, _STRING),
            pa.array(columns.values, pa.binary()),
            properties.cast(self.schema.field("properties").type),
            pa.array(publish, utc),
            pa.array(events, utc, mask=events == 0),
            message_ids,
            producers,
            pa.repeat(pa.scalar(self.topic, _STRING), rows),
            pa.repeat(pa.scalar(self.partition, pa.int32()), rows),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
