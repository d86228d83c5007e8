"""The ordered ledgers of one managed ledger and the position arithmetic over them.

Pure bookkeeping, no I/O: the managed ledger owns one instance and changes it only once
Kafka and the metadata topic agree, so every question about positions (next, previous,
how many entries between two positions) is answered from memory.

Rules (Pulsar's): entry ids of a ledger are ``0..entries-1``; the last ledger may be open,
in which case its count is the number of acknowledged entries so far and positions past
that count are "not yet written" rather than invalid. Closed ledgers without entries are
skipped when moving from one ledger to the next.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from dedup_broker.storage.values import LedgerInfo, OffloadInfo, Position


@dataclass(slots=True)
class _Ledger:
    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int
    open: bool
    offload: OffloadInfo | None = None


class LedgerList:
    """Ledgers in id order; the last one may be open (the current ledger)."""

    __slots__ = ("_ids", "_ledgers")

    def __init__(self, ledgers: Iterable[LedgerInfo] = ()) -> None:
        self._ledgers: list[_Ledger] = []
        self._ids: list[int] = []
        for info in ledgers:
            if self._ledgers and self._ledgers[-1].open:
                raise ValueError("only the last ledger may be open")
            self._append(
                info.ledger_id, max(info.entries, 0), info.size, info.timestamp_ms, info.is_open
            )
            self._ledgers[-1].offload = info.offload

    # --- changes ------------------------------------------------------------------
    def _append(self, ledger_id: int, entries: int, size: int, ts: int, is_open: bool) -> None:
        if self._ids and ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger {ledger_id} does not follow ledger {self._ids[-1]}")
        self._ledgers.append(_Ledger(ledger_id, entries, size, ts, is_open))
        self._ids.append(ledger_id)

    def add_open_ledger(self, ledger_id: int) -> None:
        """Make ``ledger_id`` the current ledger (the previous one must be closed)."""
        if self._ledgers and self._ledgers[-1].open:
            raise ValueError(f"ledger {self._ledgers[-1].ledger_id} is still open")
        self._append(ledger_id, 0, 0, 0, True)

    def resume_current(self, entries: int, size: int) -> None:
        """The current ledger already holds ``entries`` entries of ``size`` bytes (a closed
        ledger appends go on in after a clean close)."""
        current = self._ledgers[-1]
        if not current.open:
            raise ValueError(f"ledger {current.ledger_id} is not open")
        current.entries, current.size = entries, size

    def add_confirmed(self, size: int) -> None:
        """One more acknowledged entry of ``size`` bytes in the current ledger."""
        current = self._ledgers[-1]
        current.entries += 1
        current.size += size

    def close_current(self, entries: int, size: int, timestamp_ms: int) -> LedgerInfo:
        """Close the current ledger at its true end; returns its closed info."""
        current = self._ledgers[-1]
        if not current.open:
            raise ValueError(f"ledger {current.ledger_id} is not open")
        current.entries, current.size = entries, size
        current.timestamp_ms, current.open = timestamp_ms, False
        return self._info(current)

    def set_offload(self, ledger_id: int, offload: OffloadInfo | None) -> None:
        """Record (or clear) the tiered-storage copy of a closed ledger."""
        ledger = self._find(ledger_id)
        if ledger is None:
            raise ValueError(f"ledger {ledger_id} is not in the list")
        if ledger.open:
            raise ValueError(f"ledger {ledger_id} is open and cannot be offloaded")
        ledger.offload = offload

    def offload_of(self, ledger_id: int) -> OffloadInfo | None:
        ledger = self._find(ledger_id)
        return None if ledger is None else ledger.offload

    def remove(self, ledger_ids: Iterable[int]) -> None:
        drop = set(ledger_ids)
        self._ledgers = [ledger for ledger in self._ledgers if ledger.ledger_id not in drop]
        self._ids = [ledger.ledger_id for ledger in self._ledgers]

    # --- plain queries ------------------------------------------------------------
    @staticmethod
    def _info(ledger: _Ledger) -> LedgerInfo:
        if ledger.open:
            return LedgerInfo(ledger.ledger_id, -1, ledger.size, 0)
        return LedgerInfo(
            ledger.ledger_id, ledger.entries, ledger.size, ledger.timestamp_ms, ledger.offload
        )

    def infos(self) -> list[LedgerInfo]:
        return [self._info(ledger) for ledger in self._ledgers]

    def ledger_ids(self) -> list[int]:
        return list(self._ids)

    @property
    def current(self) -> LedgerInfo | None:
        """The open ledger, if the last ledger is open."""
        if self._ledgers and self._ledgers[-1].open:
            return self._info(self._ledgers[-1])
        return None

    @property
    def current_entries(self) -> int:
        return self._ledgers[-1].entries if self._ledgers else 0

    @property
    def current_size(self) -> int:
        return self._ledgers[-1].size if self._ledgers else 0

    def count(self, ledger_id: int) -> int | None:
        """Entries of ``ledger_id`` (acknowledged ones if open); None if not in the list."""
        ledger = self._find(ledger_id)
        return None if ledger is None else ledger.entries

    def number_of_entries(self) -> int:
        return sum(ledger.entries for ledger in self._ledgers)

    def total_size(self) -> int:
        return sum(ledger.size for ledger in self._ledgers)

    def _find(self, ledger_id: int) -> _Ledger | None:
        index = bisect.bisect_left(self._ids, ledger_id)
        if index < len(self._ids) and self._ids[index] == ledger_id:
            return self._ledgers[index]
        return None

    # --- positions ----------------------------------------------------------------
    @property
    def last_id(self) -> int:
        return self._ids[-1] if self._ids else -1

    def last_confirmed(self) -> Position:
        """The last existing entry; ``(last_ledger, -1)`` when there is none."""
        for ledger in reversed(self._ledgers):
            if ledger.entries > 0:
                return Position(ledger.ledger_id, ledger.entries - 1)
        return Position(self.last_id, -1)

    def first_position(self) -> Position:
        """The first existing entry, or where the first entry will be written."""
        for ledger in self._ledgers:
            if ledger.entries > 0:
                return Position(ledger.ledger_id, 0)
        return Position(self.last_id, 0)

    def before_first(self) -> Position:
        """The mark-delete position meaning "nothing acknowledged"."""
        return Position(self.first_position().ledger_id, -1)

    def exists(self, p: Position) -> bool:
        ledger = self._find(p.ledger_id)
        return ledger is not None and 0 <= p.entry_id < ledger.entries

    def next_position(self, p: Position) -> Position:
        """The position after ``p``: the next entry, or where the next one will be written."""
        index = bisect.bisect_left(self._ids, p.ledger_id)
        if index < len(self._ids) and self._ids[index] == p.ledger_id:
            ledger = self._ledgers[index]
            if p.entry_id + 1 < ledger.entries or ledger.open:
                return Position(p.ledger_id, p.entry_id + 1)
            index += 1
        for ledger in self._ledgers[index:]:
            if ledger.entries > 0 or ledger.open:
                return Position(ledger.ledger_id, 0)
        return Position(p.ledger_id, p.entry_id + 1)

    def previous_position(self, p: Position) -> Position:
        """The last existing entry before ``p``, or :meth:`before_first` if there is none."""
        index = bisect.bisect_left(self._ids, p.ledger_id)
        if index < len(self._ids) and self._ids[index] == p.ledger_id:
            ledger = self._ledgers[index]
            if p.entry_id > 0 and ledger.entries > 0:
                return Position(p.ledger_id, min(p.entry_id, ledger.entries) - 1)
        for ledger in reversed(self._ledgers[:index]):
            if ledger.entries > 0:
                return Position(ledger.ledger_id, ledger.entries - 1)
        return self.before_first()

    def normalize(self, p: Position) -> Position:
        """The first position at or after ``p`` that exists or will be written next."""
        return self.next_position(Position(p.ledger_id, max(p.entry_id, 0) - 1))

    def entries_between(self, start: Position, end: Position) -> int:
        """Existing entries in ``[start, end]``."""
        if end < start:
            return 0
        total = 0
        first = bisect.bisect_left(self._ids, start.ledger_id)
        for ledger in self._ledgers[first:]:
            if ledger.ledger_id > end.ledger_id:
                break
            low = start.entry_id if ledger.ledger_id == start.ledger_id else 0
            high = end.entry_id if ledger.ledger_id == end.ledger_id else ledger.entries - 1
            low, high = max(low, 0), min(high, ledger.entries - 1)
            if high >= low:
                total += high - low + 1
        return total
