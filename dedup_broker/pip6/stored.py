"""What deduplication learns from a stored entry: its producer and sequence ids.

``stored_sequence`` is the reference reading of one entry. ``ReplayFold`` is recovery's
hot loop over up to millions of entries: it keeps the highest sequence id of each
producer and reads the common entry (checksummed, no marker, no chunk, no batch or a
batch with ``highest_sequence_id`` covering exactly its messages, above the producer's
mark) through one reused metadata object; every other entry, and every entry the fast
reading is not certain about, goes through ``stored_sequence``, so both always agree.
Entries that may open or close holes (``pip6.holes``) are kept, in order, for the state.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from dedup_broker.errors import ProtocolError
from dedup_broker.pip6.chunks import Chunk
from dedup_broker.pip6.marks import ReplayedEntry
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_sequence_ids, is_batch
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
    ids: tuple[int, ...] | None = None
    """Every message's id, when they are not exactly ``lowest..highest``."""


SequenceRun = tuple[int, int, tuple[int, ...] | None]
"""lowest, highest, and the ids when they are not exactly that run."""


def sequence_run(
    metadata: pb.MessageMetadata,
    lowest: int,
    highest: int | None,
    block: bytes,
) -> SequenceRun:
    """The sequence ids an entry (or a SEND) covers, as Pulsar's signed longs.

    ``highest``: the id the client gave as the highest (Java clients do), if any. The
    batch's messages are read (``payload``) unless ``lowest..highest`` holds exactly as
    many ids as the batch has messages (``block``: the entry as stored or sent, read
    only then): C++-based clients give no highest, the Java
    client's key-based batches name their last message's id as both lowest and highest,
    and a batch PIP-6 rewrote keeps the range of the SEND but fewer messages. The range
    starts at the lowest of ``lowest`` and the messages' ids.
    When the messages cannot be read (encrypted, a codec not installed) the ids are
    taken as consecutive from ``lowest``, which is how clients assign them.
    """
    if not is_batch(metadata):
        return lowest, lowest, None
    count = metadata.num_messages_in_batch
    usable = highest is not None and highest >= lowest
    if usable and highest is not None and highest - lowest + 1 == count:
        return lowest, highest, None
    ids = batch_sequence_ids(metadata, parse_message(block).payload)
    if not ids:
        top = highest if usable and highest is not None else lowest + max(count, 1) - 1
        return lowest, top, None
    low, top = min(ids), max(ids)
    low = min(low, lowest)
    if usable and highest is not None:
        top = max(top, highest)
    # First and last in place and as many ids as the run holds: the run (a batch naming
    # one id twice would hide a gap, which then only makes a later id a duplicate).
    if ids[0] == low and ids[-1] == top and len(ids) == top - low + 1:
        return low, top, None
    return low, top, tuple(ids)


def stored_sequence(block: bytes) -> StoredSequence | None:
    """Producer and sequence ids of a stored message block; None if it does not count.

    Broker markers carry no producer sequence. The chunks of a chunked message share
    one sequence id and the message exists only once its last chunk is stored, so
    only that chunk counts. Raises ProtocolError when the block does not parse.
    """
    metadata = parse_metadata_only(block)
    if metadata.HasField("marker_type"):
        return None
    chunks = metadata.num_chunks_from_msg if metadata.HasField("num_chunks_from_msg") else 0
    if chunks > 1 and metadata.chunk_id != chunks - 1:
        return None
    highest = (
        as_signed64(metadata.highest_sequence_id)
        if metadata.HasField("highest_sequence_id")
        else None
    )
    low, high, ids = sequence_run(metadata, as_signed64(metadata.sequence_id), highest, block)
    return StoredSequence(metadata.producer_name, low, high, ids)


FoldedChunks = list[tuple[Chunk, int, int]]
Unreadable = list[tuple[int, int, ProtocolError]]


class ReplayFold:
    """Folds replayed entries into ``producer -> highest sequence id`` (an EntryVisitor).

    Called by a storage scan in a worker thread; the owner takes the results on the
    event loop between scans (:meth:`take`, :meth:`take_irregular`), never while a scan
    runs.
    """

    __slots__ = ("_metadata", "chunks", "entries", "highest", "irregular", "marks", "unreadable")

    def __init__(self, marks: dict[str, int] | None = None) -> None:
        """``marks``: each producer's mark where the replay starts (the snapshot's)."""
        self._metadata = pb.MessageMetadata()
        self.marks: dict[str, int] = marks if marks is not None else {}
        """Each producer's mark as of the last entry folded."""
        self.highest: dict[str, int] = {}
        """The marks raised since the last :meth:`take`."""
        self.entries = 0
        """Entries folded, counted or not (markers, early chunks, unreadable ones)."""
        self.unreadable: Unreadable = []
        """``(ledger_id, entry_id, why)`` of entries whose metadata does not parse."""
        self.chunks: FoldedChunks = []
        """``(chunk, ledger_id, entry_id)`` of every early chunk (all but a last one)."""
        self.irregular: list[ReplayedEntry] = []
        """Entries whose ids are not one run right after their producer's mark, in order
        (they open or close holes)."""

    def take(
        self,
    ) -> tuple[dict[str, int], int, list[tuple[int, int, ProtocolError]], FoldedChunks]:
        """What was folded since the last call: highest ids, entry count, unreadable
        entries, early chunks."""
        taken = (self.highest, self.entries, self.unreadable, self.chunks)
        self.highest, self.entries, self.unreadable, self.chunks = {}, 0, [], []
        return taken

    def take_irregular(self) -> list[ReplayedEntry]:
        taken, self.irregular = self.irregular, []
        return taken

    def __call__(self, ledger_id: int, first_entry_id: int, blocks: list[bytes]) -> None:
        # One loop, no call per entry beyond the protobuf ones: it runs a million times.
        highest = self.highest
        marks = self.marks
        metadata = self._metadata
        parse = metadata.ParseFromString
        complete = metadata.IsInitialized
        has = metadata.HasField
        head = _CHECKSUMMED_HEAD.unpack_from
        for entry_id, block in enumerate(blocks, first_entry_id):
            name: str | None = None
            low = sequence = 0
            ids: tuple[int, ...] | None = None
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
                        elif has("highest_sequence_id"):
                            top = metadata.highest_sequence_id
                            top = top - _WRAP if top >= _SIGN_BIT else top
                            if top >= low and top - low + 1 == metadata.num_messages_in_batch:
                                name, sequence = metadata.producer_name, top
                        if name is not None:
                            mark = marks.get(name)
                            if mark is not None and low <= mark:
                                name = None  # it may close holes: its ids are read below
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
                name, low, sequence, ids = (
                    stored.producer_name,
                    stored.lowest,
                    stored.highest,
                    stored.ids,
                )
            mark = marks.get(name)
            if ids is not None or low != (-1 if mark is None else mark) + 1:
                self.irregular.append(ReplayedEntry(name, low, sequence, ids, mark))
            if mark is None or sequence > mark:
                marks[name] = sequence
                highest[name] = sequence
        self.entries += len(blocks)
