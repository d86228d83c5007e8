"""A ``read_compacted`` subscription's reading: the compacted view up to its horizon,
then the topic itself after it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from dedup_broker.storage.api import Entry, ManagedCursor, ManagedLedger, Position

if TYPE_CHECKING:
    from dedup_broker.compaction.view import CompactedView

CompactedViewSource = Callable[[], Awaitable["CompactedView | None"]]
"""The topic's compacted view (None before its first compaction)."""


class CompactedReads:
    __slots__ = ("_cursor", "_ledger", "_next", "_view")

    def __init__(
        self,
        view: CompactedViewSource,
        start: Position | None,
        cursor: ManagedCursor,
        ledger: ManagedLedger,
    ) -> None:
        """From ``start`` (None: from the first unacknowledged position)."""
        self._view = view
        self._cursor = cursor
        self._ledger = ledger
        self._next: Position | None = start if start is not None else self.first_unacknowledged()
        """The next position to serve from the view; None once the view is behind."""

    def first_unacknowledged(self) -> Position:
        """Compacted data may lie in trimmed ledgers: nothing acknowledged means all of it."""
        mark_delete = self._cursor.mark_delete_position
        if mark_delete < self._ledger.first_position() and mark_delete.entry_id < 0:
            return Position(-1, -1)
        return Position(mark_delete.ledger_id, mark_delete.entry_id + 1)

    def restart_at(self, position: Position) -> None:
        self._next = position

    async def read(self, budget: int) -> list[Entry] | None:
        """Entries of the compacted view, or None once the view is behind the reader."""
        if self._next is None:
            return None
        view = await self._view()
        if view is None:
            self._next = None
            return None
        while True:
            chunk = view.read(self._next, budget)
            if not chunk:  # the topic goes on after the horizon
                self._next = None
                after = Position(view.horizon.ledger_id, view.horizon.entry_id + 1)
                if self._cursor.read_position < after:
                    self._cursor.seek(after)
                return None
            last = chunk[-1].position
            self._next = Position(last.ledger_id, last.entry_id + 1)
            ready = [e for e in chunk if not self._cursor.is_acknowledged(e.position)]
            if ready:
                return ready
