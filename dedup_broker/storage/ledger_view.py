"""The read side of a managed ledger: positions, entries, listeners and cursors.

Everything here answers from the in-memory ledger list or reads through the entry reader
(cache, Kafka, tiered storage); the write side (appends, rollover, failures, the
metadata record) is ``managed_ledger.py``, which extends this class and the write side's
own base classes (``ledger_rollover.py``, ``ledger_recovery.py``,
``ledger_list_updates.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from dedup_broker.errors import EntryNotFoundError
from dedup_broker.storage.cursor import DEFAULT_MAX_BYTES, ManagedCursor
from dedup_broker.storage.cursor_registry import CursorRegistry
from dedup_broker.storage.entry_reader import EntryReader
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.position import Entry, EntryVisitor, LedgerInfo, Position

log = logging.getLogger(__name__)


class ManagedLedgerView:
    """Set by the subclass's constructor."""

    name: str
    _loop: asyncio.AbstractEventLoop
    _ledgers: LedgerList
    _last_confirmed: Position
    _reader: EntryReader
    _cursors: CursorRegistry
    _listeners: list[Callable[[], None]]
    _notify_scheduled: bool

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
        """The first position at or after ``p`` that exists or will be written next."""
        return self._ledgers.normalize(p)

    def is_valid_position(self, p: Position) -> bool:
        """True if an entry exists at ``p``."""
        return self._ledgers.exists(p)

    def number_of_entries(self) -> int:
        return self._ledgers.number_of_entries()

    def entries_between(self, start: Position, end: Position) -> int:
        return self._ledgers.entries_between(start, end)

    def ledgers(self) -> list[LedgerInfo]:
        return self._ledgers.infos()

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        return next((i for i in self._ledgers.infos() if i.ledger_id == ledger_id), None)

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
        return await self._reader.read(
            self._ledgers, self._last_confirmed, start, max_entries, max_bytes
        )

    async def scan_entries(
        self, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Hands the data of entries from ``start`` on (never beyond ``last_confirmed``,
        at most ``max_entries``) to ``visit`` in a worker thread, bypassing the cache;
        returns the last position handed, None if there was none. For replays that fold
        many entries into a little state."""
        self._check_readable()
        return await self._reader.scan(
            self._ledgers, self._last_confirmed, start, max_entries, visit
        )

    async def read_entry(self, position: Position) -> Entry:
        if not self._ledgers.exists(position) or position > self._last_confirmed:
            raise EntryNotFoundError(f"{self.name}: no entry at {position}")
        entries = await self.read_entries(position, 1)
        if not entries or entries[0].position != position:
            raise EntryNotFoundError(f"{self.name}: no entry at {position}")
        return entries[0]

    async def find_position_by_time(self, timestamp_ms: int) -> Position:
        """The first entry whose timestamp is >= ``timestamp_ms``, else the position
        after ``last_confirmed`` (timestamps are assumed not to decrease)."""
        self._check_readable()
        return await self._reader.find_by_time(self._ledgers, self._last_confirmed, timestamp_ms)

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
            try:
                callback()
            except Exception:
                log.exception("%s: entries listener failed", self.name)

    # --- cursors --------------------------------------------------------------------
    async def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """The durable cursor ``name``: its stored state if it exists, else a new one at
        ``"latest"`` (mark-delete = last_confirmed) or ``"earliest"`` (just before the
        first entry), stored before this returns."""
        self._check_open()
        return await self._cursors.open(name, initial_position)

    def new_non_durable_cursor(
        self, start: Position | None, inclusive: bool = False, name: str = ""
    ) -> ManagedCursor:
        """A cursor kept in memory only (readers). ``start`` None: after last_confirmed; a
        position before the first entry: from the first entry; else from ``start`` if
        ``inclusive``, otherwise from the entry after it."""
        return self._cursors.new_non_durable(start, inclusive, name)

    async def delete_cursor(self, name: str) -> None:
        await self._cursors.delete(name)
        self._cursor_moved()  # the slowest cursor may have gone

    def cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors opened on this instance."""
        return self._cursors.opened()

    def cursor_exists(self, name: str) -> bool:
        """True for a durable cursor that is stored (opened here or not)."""
        return self._cursors.exists(name)

    def stored_cursor_names(self) -> list[str]:
        return self._cursors.stored_names()
