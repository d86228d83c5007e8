"""PIP-6 for the chunks of a chunked message: each chunk stored once.

All chunks of a message carry its sequence id, and only the last one completes it, so
Pulsar judges only the last chunk and stores every earlier one as it comes. A producer
that resends a message after a failover (its earlier chunks had landed, their receipts
never came) then leaves two copies of those chunks in the topic, and a consumer that
meets chunk 0 twice drops the whole message (the C++-based clients do). Here the chunks
stored of each producer's message in progress are remembered, so a resent chunk is
answered with the position it is stored at instead of being stored again.

The memory of a message in progress must survive a failover: the deduplication snapshot
never moves past the first chunk of one (``first_position``), so recovery replays it and
``ChunkFold`` rebuilds the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.commands import as_signed64
from dedup_broker.storage.api import Position


@dataclass(frozen=True, slots=True)
class Chunk:
    """Which chunk of which message an entry holds."""

    producer_name: str
    sequence_id: int
    uuid: str
    chunk_id: int
    chunks: int

    @property
    def is_last(self) -> bool:
        return self.chunk_id == self.chunks - 1

    @classmethod
    def of(cls, metadata: pb.MessageMetadata) -> Chunk | None:
        """The chunk an entry's metadata describes; None unless it is a chunk."""
        if not metadata.HasField("num_chunks_from_msg") or metadata.num_chunks_from_msg < 2:
            return None
        return cls(
            metadata.producer_name,
            as_signed64(metadata.sequence_id),
            metadata.uuid,
            metadata.chunk_id,
            metadata.num_chunks_from_msg,
        )


@dataclass(slots=True)
class ChunkRun:
    """The chunks of one producer's message in progress: stored (with their positions)
    and admitted (written or being written)."""

    sequence_id: int
    uuid: str
    stored: dict[int, Position] = field(default_factory=dict)
    admitted: set[int] = field(default_factory=set)

    def matches(self, chunk: Chunk) -> bool:
        return self.sequence_id == chunk.sequence_id and self.uuid == chunk.uuid

    @property
    def first_position(self) -> Position | None:
        return min(self.stored.values(), default=None)


class ChunkVerdict(Enum):
    """What to do with an early chunk (any chunk but the last)."""

    NEW = "new"
    """Write it."""
    STORED = "stored"
    """It is stored already: answer its position."""
    IN_FLIGHT = "in-flight"
    """An earlier copy is being written: the client resends later."""


_NO_RUNS: dict[str, ChunkRun] = {}
"""Shared by every topic with no chunked message in progress (never written to)."""


class ChunkProgress:
    """Each producer's chunked message in progress."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs = _NO_RUNS

    def _started(self, chunk: Chunk) -> ChunkRun:
        if self._runs is _NO_RUNS:
            self._runs = {}
        run = self._runs[chunk.producer_name] = ChunkRun(chunk.sequence_id, chunk.uuid)
        return run

    def __len__(self) -> int:
        return len(self._runs)

    def check(self, chunk: Chunk) -> tuple[ChunkVerdict, Position | None]:
        """An early chunk of a message not complete yet: new, stored already, or an
        earlier copy still in flight. Admits it when new."""
        run = self._runs.get(chunk.producer_name)
        if run is None or not run.matches(chunk):
            # A later message (or the first one): whatever was in progress is abandoned.
            run = self._started(chunk)
        stored = run.stored.get(chunk.chunk_id)
        if stored is not None:
            return ChunkVerdict.STORED, stored
        if chunk.chunk_id in run.admitted:
            return ChunkVerdict.IN_FLIGHT, None
        run.admitted.add(chunk.chunk_id)
        return ChunkVerdict.NEW, None

    def stored(self, chunk: Chunk, position: Position) -> None:
        """An early chunk was stored (acknowledged, landed, or replayed)."""
        run = self._runs.get(chunk.producer_name)
        if run is None or not run.matches(chunk):
            if run is not None and run.sequence_id > chunk.sequence_id:
                return  # an older message's chunk: nothing in progress of it
            run = self._started(chunk)
        run.stored.setdefault(chunk.chunk_id, position)
        run.admitted.add(chunk.chunk_id)

    def complete(self, producer_name: str, sequence_id: int) -> None:
        """The producer's messages up to ``sequence_id`` are complete."""
        run = self._runs.get(producer_name)
        if run is not None and run.sequence_id <= sequence_id:
            del self._runs[producer_name]
            if not self._runs:
                self._runs = _NO_RUNS

    def failed(self) -> None:
        """A write failed: what was admitted but not stored may or may not have landed;
        what did is learned from Kafka (``stored``), the rest may be sent again."""
        for run in self._runs.values():
            run.admitted = set(run.stored)

    def forget(self, producer_name: str) -> None:
        self._runs.pop(producer_name, None)

    def oldest_first_position(self) -> Position | None:
        """The first stored chunk of any message in progress (snapshots stay before it)."""
        return min(
            (p for run in self._runs.values() if (p := run.first_position) is not None),
            default=None,
        )
