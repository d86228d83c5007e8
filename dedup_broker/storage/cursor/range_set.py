"""A set of positions kept as sorted, disjoint, inclusive ranges within single ledgers.

A cursor's individually acknowledged entries: acks usually arrive in runs, so ranges
stay few even for large backlogs. A range never spans two ledgers, which keeps counting
exact without knowing ledger sizes (crossing a ledger boundary is the cursor's job).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from dedup_broker.storage.values import Position

_EMPTY: list[Position] = []
"""Shared by every empty set (most cursors have no gap): written to never, replaced by
lists of the set's own on its first range."""


class PositionRangeSet:
    """Sorted disjoint ``[start, end]`` ranges; ``start.ledger_id == end.ledger_id``."""

    __slots__ = ("_ends", "_size", "_starts")

    def __init__(self) -> None:
        self._starts = self._ends = _EMPTY
        self._size = 0

    def __len__(self) -> int:
        """Number of positions in the set."""
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __contains__(self, p: object) -> bool:
        return isinstance(p, Position) and self.range_containing(p) is not None

    def range_containing(self, p: Position) -> tuple[Position, Position] | None:
        index = bisect.bisect_right(self._starts, p) - 1
        if index >= 0 and p <= self._ends[index]:
            return self._starts[index], self._ends[index]
        return None

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        return iter(list(zip(self._starts, self._ends, strict=True)))

    def range_count(self) -> int:
        return len(self._starts)

    def first_after(self, p: Position) -> tuple[Position, Position] | None:
        """The first range starting after ``p``."""
        index = bisect.bisect_right(self._starts, p)
        if index < len(self._starts):
            return self._starts[index], self._ends[index]
        return None

    def first(self) -> tuple[Position, Position] | None:
        return (self._starts[0], self._ends[0]) if self._starts else None

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._size = 0

    def add(self, p: Position) -> bool:
        """Add one position; False if it was already present."""
        return self.add_range(p, p)

    def add_range(self, start: Position, end: Position) -> bool:
        """Add ``[start, end]`` (one ledger); False if nothing new was added."""
        if start.ledger_id != end.ledger_id or end < start:
            raise ValueError(f"bad range [{start}, {end}]")
        ledger = start.ledger_id
        # Ranges that overlap or touch [start, end] within the same ledger merge into it.
        low = bisect.bisect_left(self._ends, Position(ledger, start.entry_id - 1))
        high = bisect.bisect_right(self._starts, Position(ledger, end.entry_id + 1))
        merged_start, merged_end = start, end
        removed = 0
        for index in range(low, high):
            merged_start = min(merged_start, self._starts[index])
            merged_end = max(merged_end, self._ends[index])
            removed += self._ends[index].entry_id - self._starts[index].entry_id + 1
        added = merged_end.entry_id - merged_start.entry_id + 1 - removed
        if added == 0:
            return False
        if self._starts is _EMPTY:
            self._starts, self._ends = [], []
        self._starts[low:high] = [merged_start]
        self._ends[low:high] = [merged_end]
        self._size += added
        return True

    def remove_up_to(self, p: Position) -> None:
        """Drop every position ``<= p``."""
        cut = bisect.bisect_right(self._ends, p)
        for index in range(cut):
            self._size -= self._ends[index].entry_id - self._starts[index].entry_id + 1
        del self._starts[:cut]
        del self._ends[:cut]
        if self._starts and self._starts[0] <= p:
            trimmed = Position(p.ledger_id, p.entry_id + 1)
            self._size -= trimmed.entry_id - self._starts[0].entry_id
            self._starts[0] = trimmed

    def pop_first(self) -> tuple[Position, Position]:
        start, end = self._starts.pop(0), self._ends.pop(0)
        self._size -= end.entry_id - start.entry_id + 1
        return start, end

    def count_between(self, start: Position, end: Position) -> int:
        """Positions of the set inside ``[start, end]``."""
        total = 0
        first = max(bisect.bisect_left(self._ends, start), 0)
        for index in range(first, len(self._starts)):
            low, high = max(self._starts[index], start), min(self._ends[index], end)
            if low > end:
                break
            if low.ledger_id == high.ledger_id and high >= low:
                total += high.entry_id - low.entry_id + 1
        return total
