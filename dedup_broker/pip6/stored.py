"""What deduplication learns from a stored entry: its producer and sequence range.

``stored_sequence`` is the reference reading of one entry. ``ReplayFold`` is recovery's
hot loop over up to millions of entries: it keeps only the highest sequence id of each
producer and reads the common entry (checksummed, no marker, no chunk, no batch or a
batch with ``highest_sequence_id``) through one reused metadata object; every other
entry, and every entry the fast reading is not certain about, goes through
``stored_sequence``, so both always agree.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from dedup_broker.errors import ProtocolError
from dedup_broker.pip6.chunks import Chunk
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_sequence_range, is_batch
from dedup_broker.protocol.commands import as_signed64
from dedup_broker.protocol.framing import MAGIC_CRC32C, parse_message, parse_metadata_only

_CHECKSUMMED_HEAD = struct.Struct(">H4xi")  # magic, (crc32c), metadata size
_HEAD_SIZE = _CHECKSUMMED_HEAD.size
_SIGN_BIT = 1 << 63
_WRAP = 1 << 64


@dataclass(frozen=True, slots=True)
class StoredSequence:
    """The deduplication facts of one stored entry."""

    producer_name: str
    lowest: int
    highest: int


def stored_sequence(block: bytes) -> StoredSequence | None:
    """Producer and sequence range of a stored message block; None if it does not count.

    Broker markers carry no producer sequence. The chunks of a chunked message share
    one sequence id and the message exists only once its last chunk is stored, so
    only that chunk counts. Batch payloads are looked at only when the metadata lacks a
    usable ``highest_sequence_id``; ids are read as Pulsar's signed 64-bit longs.
    Raises ProtocolError when the block does not parse.
    """
    metadata = parse_metadata_only(block)
    if metadata.HasField("marker_type"):
        return None
    chunks = metadata.num_chunks_from_msg if metadata.HasField("num_chunks_from_msg") else 0
    if chunks > 1 and metadata.chunk_id != chunks - 1:
        return None
    has_highest = (
        metadata.HasField("highest_sequence_id")
        and metadata.highest_sequence_id >= metadata.sequence_id
    )
    payload = parse_message(block).payload if is_batch(metadata) and not has_highest else b""
    lowest, highest = batch_sequence_range(metadata, payload)
    low = as_signed64(lowest)
    return StoredSequence(metadata.producer_name, low, max(as_signed64(highest), low))


FoldedChunks = list[tuple[Chunk, int, int]]
Unreadable = list[tuple[int, int, ProtocolError]]


class ReplayFold:
    """Folds replayed entries into ``producer -> highest sequence id`` (an EntryVisitor).

    Called by a storage scan in a worker thread; the owner takes the results on the
    event loop between scans (:meth:`take`), never while a scan runs.
    """

    __slots__ = ("_metadata", "chunks", "entries", "highest", "unreadable")

    def __init__(self) -> None:
        self._metadata = pb.MessageMetadata()
        self.highest: dict[str, int] = {}
        self.entries = 0
        """Entries folded, counted or not (markers, early chunks, unreadable ones)."""
        self.unreadable: Unreadable = []
        """``(ledger_id, entry_id, why)`` of entries whose metadata does not parse."""
        self.chunks: FoldedChunks = []
        """``(chunk, ledger_id, entry_id)`` of every early chunk (all but a last one)."""

    def take(
        self,
    ) -> tuple[dict[str, int], int, list[tuple[int, int, ProtocolError]], FoldedChunks]:
        """What was folded since the last call: highest ids, entry count, unreadable
        entries, early chunks."""
        taken = (self.highest, self.entries, self.unreadable, self.chunks)
        self.highest, self.entries, self.unreadable, self.chunks = {}, 0, [], []
        return taken

    def __call__(self, ledger_id: int, first_entry_id: int, blocks: list[bytes]) -> None:
        # One loop, no call per entry beyond the protobuf ones: it runs a million times.
        highest = self.highest
        metadata = self._metadata
        parse = metadata.ParseFromString
        complete = metadata.IsInitialized
        has = metadata.HasField
        head = _CHECKSUMMED_HEAD.unpack_from
        for entry_id, block in enumerate(blocks, first_entry_id):
            name: str | None = None
            sequence = 0
            if len(block) >= _HEAD_SIZE:
                magic, size = head(block)
                if magic == MAGIC_CRC32C and 0 <= size <= len(block) - _HEAD_SIZE:
                    try:
                        parse(block[_HEAD_SIZE : _HEAD_SIZE + size])
                    except DecodeError:
                        parsed = False  # the reference reading says why
                    else:
                        parsed = complete()
                    if parsed and not has("marker_type") and not has("num_chunks_from_msg"):
                        low = metadata.sequence_id
                        low = low - _WRAP if low >= _SIGN_BIT else low
                        if not has("num_messages_in_batch"):
                            name, sequence = metadata.producer_name, low
                        elif (
                            has("highest_sequence_id")
                            and metadata.highest_sequence_id >= metadata.sequence_id
                        ):
                            top = metadata.highest_sequence_id
                            top = top - _WRAP if top >= _SIGN_BIT else top
                            name, sequence = metadata.producer_name, max(top, low)
            if name is None:
                try:
                    stored = stored_sequence(block)
                except ProtocolError as exc:
                    self.unreadable.append((ledger_id, entry_id, exc))
                    continue
                if stored is None:
                    chunk = Chunk.of(parse_metadata_only(block))
                    if chunk is not None:
                        self.chunks.append((chunk, ledger_id, entry_id))
                    continue
                name, sequence = stored.producer_name, stored.highest
            previous = highest.get(name)
            if previous is None or sequence > previous:
                highest[name] = sequence
        self.entries += len(blocks)
