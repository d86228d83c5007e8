"""The read side of the in-memory managed ledger: positions, entries, listeners, cursors.

Position arithmetic is the real ``LedgerList`` and cursors are the real ``ManagedCursor``
opened by ``CursorRegistry``; entries are read from "Kafka" in memory. The write side is
``memory_ledger.py``, which extends this class.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from dedup_broker.errors import EntryNotFoundError, StorageError
from dedup_broker.storage.cursor import DEFAULT_MAX_BYTES, ManagedCursor
from dedup_broker.storage.cursor_registry import CursorRegistry
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.position import Entry, EntryVisitor, LedgerInfo, Position

KafkaLedgers = dict[int, list[Entry]]
"""What "Kafka" holds for one managed ledger: ledger id -> its entries, in id order."""


class MemoryLedgerView:
    """Set by the subclass's constructor."""

    name: str
    _loop: asyncio.AbstractEventLoop
    _kafka: KafkaLedgers
    _ledgers: LedgerList
    _last_confirmed: Position
    _listeners: list[Callable[[], None]]
    _notify_scheduled: bool
    _cursors: CursorRegistry
    reads: list[tuple[Position, int]]
    read_gate: asyncio.Event | None

    def _check_open(self) -> None:
        raise NotImplementedError

    def _check_readable(self) -> None:
        raise NotImplementedError

    def _cursor_moved(self) -> None:
        raise NotImplementedError

    # --- positions ------------------------------------------------------------------
    @property
    def last_confirmed(self) -> Position:
        return self._last_confirmed

    def first_position(self) -> Position:
        return self._ledgers.first_position()

    def next_position(self, p: Position) -> Position:
        return self._ledgers.next_position(p)

    def previous_position(self, p: Position) -> Position:
        return self._ledgers.previous_position(p)

    def normalize_position(self, p: Position) -> Position:
        return self._ledgers.normalize(p)

    def is_valid_position(self, p: Position) -> bool:
        return self._ledgers.exists(p)

    def number_of_entries(self) -> int:
        return self._ledgers.number_of_entries()

    def entries_between(self, start: Position, end: Position) -> int:
        return self._ledgers.entries_between(start, end)

    def ledgers(self) -> list[LedgerInfo]:
        return self._ledgers.infos()

    @property
    def total_size(self) -> int:
        return self._ledgers.total_size()

    # --- reading --------------------------------------------------------------------
    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]:
        """Entries from ``start`` on, never beyond ``last_confirmed``, across ledgers; at
        least one (if any is available) even when larger than ``max_bytes``."""
        self._check_readable()
        self.reads.append((start, max_entries))
        if self.read_gate is not None:
            await self.read_gate.wait()
        await asyncio.sleep(0)  # a read is I/O
        result: list[Entry] = []
        size = 0
        position = self._ledgers.normalize(start)
        while len(result) < max_entries and position <= self._last_confirmed:
            entries = self._kafka.get(position.ledger_id, [])
            if not 0 <= position.entry_id < len(entries):
                raise StorageError(f"{self.name}: entry {position} could not be read")
            entry = entries[position.entry_id]
            if result and size + len(entry.data) > max_bytes:
                break
            result.append(entry)
            size += len(entry.data)
            position = self._ledgers.next_position(position)
        return result

    async def scan_entries(
        self, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Like the real scan (no size bound), recorded in ``reads`` like a read."""
        entries = await self.read_entries(start, max_entries, max_bytes=1 << 62)
        for entry in entries:
            visit(entry.position.ledger_id, entry.position.entry_id, [entry.data])
        return entries[-1].position if entries else None

    async def read_entry(self, position: Position) -> Entry:
        if not self._ledgers.exists(position) or position > self._last_confirmed:
            raise EntryNotFoundError(f"{self.name}: no entry at {position}")
        return (await self.read_entries(position, 1))[0]

    async def find_position_by_time(self, timestamp_ms: int) -> Position:
        """The first entry whose timestamp is >= ``timestamp_ms``, else the position
        after ``last_confirmed``."""
        self._check_readable()
        await asyncio.sleep(0)
        for info in self._ledgers.infos():
            for entry in self._kafka.get(info.ledger_id, [])[: max(info.entries, 0)]:
                if entry.timestamp_ms >= timestamp_ms and entry.position <= self._last_confirmed:
                    return entry.position
        return self._ledgers.next_position(self._last_confirmed)

    def add_entries_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback`` runs (on the loop) whenever ``last_confirmed`` advances."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    def _schedule_notify(self) -> None:
        if not self._notify_scheduled:
            self._notify_scheduled = True
            self._loop.call_soon(self._notify)

    def _notify(self) -> None:
        self._notify_scheduled = False
        for callback in list(self._listeners):
            callback()

    # --- cursors --------------------------------------------------------------------
    async def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        self._check_open()
        return await self._cursors.open(name, initial_position)

    def new_non_durable_cursor(
        self, start: Position | None, inclusive: bool = False, name: str = ""
    ) -> ManagedCursor:
        return self._cursors.new_non_durable(start, inclusive, name)

    async def delete_cursor(self, name: str) -> None:
        await self._cursors.delete(name)
        self._cursor_moved()

    def cursors(self) -> dict[str, ManagedCursor]:
        return self._cursors.opened()

    def cursor_exists(self, name: str) -> bool:
        return self._cursors.exists(name)

    def stored_cursor_names(self) -> list[str]:
        return self._cursors.stored_names()

    def durable_mark_deletes(self) -> list[Position]:
        return self._cursors.durable_mark_deletes()
