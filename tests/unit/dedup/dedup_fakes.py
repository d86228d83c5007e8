"""A small in-memory stand-in for our ManagedLedger, with the real ManagedCursor on top.

Only what deduplication uses is modelled: ledgers of entries, position arithmetic,
reads, and durable cursors whose state is "stored" as the encoded ManagedCursorInfo
bytes the real storage writes (so a reopened fake sees exactly what was persisted).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, cast

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import CursorNotFoundError, StorageError
from dedup_broker.pip6.state import MessageDeduplication
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage import formats
from dedup_broker.storage.cursor import ManagedCursor
from dedup_broker.storage.position import Entry, Position


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLedger:
    """Entries in ledgers ``first_id, first_id + 1, ...``; the last ledger is the open one."""

    def __init__(self, name: str = "public/default/persistent/t", first_id: int = 3) -> None:
        self.name = name
        self.state = "Open"
        self._ledgers: dict[int, list[Entry]] = {first_id: []}
        self.stored_cursors: dict[str, bytes] = {}
        self._open: dict[str, ManagedCursor] = {}
        self.cursor_writes: list[tuple[str, bytes]] = []
        self.fail_cursor_writes = False
        self.fail_open_cursor = False
        self.write_gate: asyncio.Event | None = None
        self.writes_in_progress = 0
        self.max_writes_in_progress = 0
        self.reads: list[tuple[Position, int]] = []
        self.read_gate: asyncio.Event | None = None

    # --- writing ------------------------------------------------------------------
    def append(self, data: bytes, timestamp_ms: int = 0) -> Position:
        ledger_id = max(self._ledgers)
        entries = self._ledgers[ledger_id]
        position = Position(ledger_id, len(entries))
        entries.append(Entry(position, data, timestamp_ms))
        return position

    def roll(self) -> int:
        """Closes the current ledger and opens the next one."""
        ledger_id = max(self._ledgers) + 1
        self._ledgers[ledger_id] = []
        return ledger_id

    def reopened(self) -> FakeLedger:
        """The same stored data seen by a fresh process: only persisted cursor state."""
        other = FakeLedger(self.name)
        other._ledgers = {k: list(v) for k, v in self._ledgers.items()}
        other.stored_cursors = dict(self.stored_cursors)
        return other

    # --- positions ----------------------------------------------------------------
    @property
    def last_confirmed(self) -> Position:
        for ledger_id in sorted(self._ledgers, reverse=True):
            entries = self._ledgers[ledger_id]
            if entries:
                return entries[-1].position
        return Position(min(self._ledgers), -1)

    def next_position(self, p: Position) -> Position:
        entries = self._ledgers.get(p.ledger_id, [])
        later = [i for i in sorted(self._ledgers) if i > p.ledger_id]
        if p.entry_id + 1 < len(entries) or not later:
            return Position(p.ledger_id, p.entry_id + 1)
        return Position(later[0], 0)

    def previous_position(self, p: Position) -> Position:
        return Position(p.ledger_id, p.entry_id - 1)

    def is_valid_position(self, p: Position) -> bool:
        return 0 <= p.entry_id < len(self._ledgers.get(p.ledger_id, []))

    def entries_between(self, start: Position, end: Position) -> int:
        return sum(1 for e in self._all() if start <= e.position <= end)

    def normalize_position(self, p: Position) -> Position:
        return p

    def _all(self) -> list[Entry]:
        return [e for i in sorted(self._ledgers) for e in self._ledgers[i]]

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = 5 * 1024 * 1024
    ) -> list[Entry]:
        self.reads.append((start, max_entries))
        if self.read_gate is not None:
            await self.read_gate.wait()
        await asyncio.sleep(0)
        return [e for e in self._all() if e.position >= start][:max_entries]

    # --- cursors ------------------------------------------------------------------
    async def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        if self.fail_open_cursor:
            raise StorageError("cursor topic unavailable")
        if name in self._open:
            return self._open[name]
        stored = self.stored_cursors.get(name)
        if stored is not None:
            record = formats.decode_cursor_info(stored)
            cursor = ManagedCursor(
                cast(Any, self),
                name,
                record.mark_delete,
                storage=cast(Any, _CursorStore(self)),
                properties=record.properties,
                rate_limit=1000.0,
                persisted=True,
                last_persisted_ms=record.last_active_ms,
            )
        else:
            start = (
                Position(min(self._ledgers), -1)
                if initial_position == "earliest"
                else self.last_confirmed
            )
            cursor = ManagedCursor(
                cast(Any, self),
                name,
                start,
                storage=cast(Any, _CursorStore(self)),
                rate_limit=1000.0,
            )
            self.stored_cursors[name] = formats.encode_cursor_info(
                formats.CursorRecord(start, [], {}, 0)
            )
        self._open[name] = cursor
        return cursor

    def cursor_exists(self, name: str) -> bool:
        return name in self.stored_cursors

    async def delete_cursor(self, name: str) -> None:
        if name not in self.stored_cursors:
            raise CursorNotFoundError(name)
        cursor = self._open.pop(name, None)
        if cursor is not None:
            await cursor.discard()
        del self.stored_cursors[name]

    def stored_cursor(self, name: str) -> formats.CursorRecord:
        return formats.decode_cursor_info(self.stored_cursors[name])


class _CursorStore:
    """The "cursor topic" of a FakeLedger."""

    def __init__(self, ledger: FakeLedger) -> None:
        self._ledger = ledger

    async def write_cursor(self, name: str, data: bytes) -> None:
        ledger = self._ledger
        ledger.writes_in_progress += 1
        ledger.max_writes_in_progress = max(
            ledger.max_writes_in_progress, ledger.writes_in_progress
        )
        try:
            if ledger.write_gate is not None:
                await ledger.write_gate.wait()
            await asyncio.sleep(0)
            if ledger.fail_cursor_writes:
                raise StorageError("Kafka did not acknowledge the cursor write")
            ledger.stored_cursors[name] = data
            ledger.cursor_writes.append((name, data))
        finally:
            ledger.writes_in_progress -= 1


def message(producer: str, sequence_id: int, **fields: Any) -> bytes:
    """A stored message block as a producer would have sent it."""
    metadata = pb.MessageMetadata(
        producer_name=producer, sequence_id=sequence_id, publish_time=1_700_000_000_000, **fields
    )
    return encode_message(metadata, b"payload")


def make_dedup(
    ledger: FakeLedger | None = None,
    clock: FakeClock | None = None,
    **settings: Any,
) -> tuple[MessageDeduplication, FakeLedger, FakeClock]:
    ledger = ledger or FakeLedger()
    clock = clock or FakeClock()
    config = BrokerConfig().with_overrides(**settings)
    return MessageDeduplication(config, cast(Any, ledger), clock=clock), ledger, clock


def run(coro: Any) -> Any:
    """Runs one test coroutine, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, 20))


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Lets a plain pytest function be written as a coroutine (fixtures still work)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        run(fn(*args, **kwargs))

    return wrapper
