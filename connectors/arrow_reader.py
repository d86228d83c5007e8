"""The source on the lean client: a planned range read as whole entries, handed to Spark
as Arrow record batches; and the driver's read-ahead, which counts messages from each
entry's metadata without splitting it."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from connectors.arrow_messages import SourceBatches, entry_message_count, message_span
from connectors.client_security import ClientSecurity
from connectors.positions import Position, partition_index
from connectors.wire import EntryReader, ReceivedEntry, WireClient, WireError, WireSettings
from dedup_broker.protocol import is_batch, parse_metadata_only

ROWS_PER_BATCH = 10_000
"""Messages per record batch handed to Spark (Spark's own Arrow batch size)."""


class ReadError(RuntimeError):
    """A range the driver planned could not be read in full (the task fails)."""


def read_arrow_range(
    service_url: str,
    security: ClientSecurity,
    topic: str,
    start: Position,
    end: Position,
    read_timeout_ms: int,
    schema: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``topic`` after ``start`` through ``end``, in log order, from the
    start of ``start``'s entry (what lies before the range is cut off by position)."""
    client = WireClient(service_url, WireSettings(security=security))
    try:
        reader = _reader(client, topic, start)
        try:
            batches = SourceBatches(topic, partition_index(topic), start, end, schema)
            while not batches.done:
                entry = _receive(reader, read_timeout_ms)
                if entry is None:
                    raise ReadError(
                        f"{topic}: no entry within {read_timeout_ms} ms after "
                        f"{start}, before the planned end {end}"
                    )
                reader.consumed(batches.add(entry.ledger_id, entry.entry_id, entry.block))
                if batches.rows >= ROWS_PER_BATCH:
                    yield batches.take()
            if batches.rows:
                yield batches.take()
        finally:
            reader.close()
    finally:
        client.close()


def count_ahead(
    client: WireClient,
    topic: str,
    start: Position,
    last: Position,
    count: int,
    read_timeout_ms: int,
) -> tuple[Position, int]:
    """The position of the ``count``-th message after ``start`` (not past ``last``), and
    how many messages that is (fewer if ``last`` comes first, or nothing more arrives)."""
    reader = _reader(client, topic, start)
    reached, read = start, 0
    try:
        while read < count:
            entry = _receive(reader, read_timeout_ms)
            if entry is None:
                break
            metadata = parse_metadata_only(entry.block)
            messages = entry_message_count(metadata)
            reader.consumed(messages)
            first, stop = message_span(entry.ledger_id, entry.entry_id, messages, start, last)
            taken = min(stop - first, count - read)
            if taken > 0:
                batched = is_batch(metadata)
                index = first + taken - 1 if batched else -1
                reached = Position(entry.ledger_id, entry.entry_id, index)
                read += taken
            if (entry.ledger_id, entry.entry_id) >= (last.ledger_id, last.entry_id):
                break
    finally:
        reader.close()
    return reached, read


def _reader(client: WireClient, topic: str, start: Position) -> EntryReader:
    # From the start's entry, inclusively: the messages up to ``start`` are cut off by
    # position, so a start inside a batch is exact.
    first = Position(start.ledger_id, start.entry_id)
    try:
        return EntryReader.create(client, topic, first)
    except WireError as exc:
        raise ReadError(f"{topic}: cannot read: {exc}") from exc


def _receive(reader: EntryReader, timeout_ms: int) -> ReceivedEntry | None:
    try:
        return reader.receive(timeout_ms / 1000)
    except WireError as exc:
        raise ReadError(f"{reader.topic}: {exc}") from exc
