"""What a managed ledger has confirmed: its ledger list, the last confirmed entry, and who
waits for more.

The write side changes it only once Kafka (and, for the list itself, the metadata topic)
agreed; the read side answers every question about positions from it. The in-memory
ledger of the unit tests keeps the same object.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.values import Position

log = logging.getLogger(__name__)


class ConfirmedLedgers:
    __slots__ = ("_notify_scheduled", "entries_added", "last", "ledgers", "listeners", "name")

    def __init__(self, name: str, ledgers: LedgerList | None = None) -> None:
        self.name = name
        self.ledgers = ledgers if ledgers is not None else LedgerList()
        self.last = self.ledgers.last_confirmed()
        """The last entry Kafka acknowledged (``(L, -1)`` while there is none)."""
        self.entries_added = 0
        """Entries confirmed since this instance opened the managed ledger (those that
        landed although their write failed included)."""
        self.listeners: list[Callable[[], None]] = []
        """Called (on the loop) whenever ``last`` advances."""
        self._notify_scheduled = False

    def reset(self, ledgers: LedgerList) -> None:
        """The list as opened: the last entry is its last existing one."""
        self.ledgers = ledgers
        self.last = ledgers.last_confirmed()

    def confirm(self, position: Position, size: int) -> None:
        """One more acknowledged entry, of ``size`` bytes, in the current ledger."""
        self.ledgers.add_confirmed(size)
        self.last = position
        self.entries_added += 1

    def close_current(self, entries: int, size: int, timestamp_ms: int) -> None:
        """The current ledger ends where Kafka says (entries that landed count)."""
        confirmed = self.ledgers.current_entries
        if entries < confirmed:
            log.error(
                "%s: Kafka holds %d entries of ledger %d, %d were acknowledged",
                self.name,
                entries,
                self.ledgers.last_id,
                confirmed,
            )
        self.entries_added += max(entries - confirmed, 0)
        self.ledgers.close_current(entries, size, timestamp_ms)
        self.last = self.ledgers.last_confirmed()

    def remove(self, ledger_ids: set[int]) -> None:
        """Trimmed ledgers leave the list; once every ledger left (lazy creation), there
        is no last entry until the next append: ``(-1, -1)``, as after a reload."""
        self.ledgers.remove(ledger_ids)
        self.last = self.ledgers.last_confirmed()

    def add_open_ledger(self, ledger_id: int) -> None:
        self.ledgers.add_open_ledger(ledger_id)
        self.last = self.ledgers.last_confirmed()

    # --- listeners ------------------------------------------------------------------
    def notify_soon(self) -> None:
        """Tell the listeners once, on the loop, however many entries came meanwhile."""
        if not self._notify_scheduled:
            self._notify_scheduled = True
            asyncio.get_running_loop().call_soon(self._notify)

    def _notify(self) -> None:
        self._notify_scheduled = False
        for callback in list(self.listeners):
            try:
                callback()
            except Exception:
                log.exception("%s: entries listener failed", self.name)
