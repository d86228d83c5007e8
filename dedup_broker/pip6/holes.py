"""Sequence ids below a producer's mark that were never stored: the gaps inside its
recent entries.

A high-water mark judges every id at or below it a duplicate. Key-based batching breaks
that for ids a live producer has not sent yet: the client splits one run of ids into a
batch per key, each spanning the run (key A: 0, 3, 6; key B: 1, 4, 7; key C: 2, 5, 8),
sent in the order of their lowest ids. Once A is stored the mark is 6, and B's 1 and 4
would pass for duplicates. So the gaps inside a stored entry's range, above the mark the
producer had before it, are kept as holes, and a later message carrying an id in a hole
is new: nothing stored earlier can hold it (every id stored before the entry is at or
below that mark), and it leaves the hole once it is stored.

Forgetting a hole is always safe for "at most once" (a late id in it is then a
duplicate, as under a plain high-water mark), so holes are bounded: the ranges opened by
the oldest entries go first, beyond ``MAX_HOLE_RANGES`` per producer or once
``HOLE_MEMORY_ENTRIES`` entries of the topic followed them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dedup_broker.storage.api import Position

MAX_HOLE_RANGES = 4096
"""Ranges kept per producer (key-based batching with K keys opens up to one per message
of a batch; the next K - 1 batches close them)."""

HOLE_MEMORY_ENTRIES = 10_000
"""Entries of the topic after which the holes an entry opened are forgotten: a key-based
flush sends its batches back to back, so they are closed long before."""


@dataclass(frozen=True, slots=True)
class Opening:
    """The stored entry whose range opened some holes."""

    position: Position
    mark_before: int | None
    """The producer's mark before the entry (None: the producer had none): a replay that
    starts there with this mark opens the same holes again."""
    serial: int
    """The topic's count of recorded entries when the entry was recorded."""


class Holes:
    """One producer's holes: disjoint ranges of ids, sorted, each with its opening.

    Ranges opened later lie above every earlier one (they start above the mark, which
    covers every earlier entry), so the order by ids is also the order of opening.
    """

    __slots__ = ("_highs", "_lows", "_openings")

    def __init__(self) -> None:
        self._lows: list[int] = []
        self._highs: list[int] = []
        self._openings: list[Opening] = []

    def __bool__(self) -> bool:
        return bool(self._lows)

    def __len__(self) -> int:
        return len(self._lows)

    def __contains__(self, sequence_id: int) -> bool:
        index = bisect_right(self._lows, sequence_id) - 1
        return index >= 0 and sequence_id <= self._highs[index]

    def intersects(self, low: int, high: int) -> bool:
        """True when some id in ``low..high`` is a hole."""
        index = bisect_right(self._lows, high) - 1
        return index >= 0 and self._highs[index] >= low

    def ranges(self) -> list[tuple[int, int]]:
        """The holes as inclusive ranges, lowest first."""
        return list(zip(self._lows, self._highs, strict=True))

    def fill(self, ids: Iterable[int]) -> None:
        """These ids are stored now: they leave their holes."""
        lows, highs, openings = self._lows, self._highs, self._openings
        for sequence_id in ids:
            index = bisect_right(lows, sequence_id) - 1
            if index < 0 or sequence_id > highs[index]:
                continue
            low, high = lows[index], highs[index]
            if low == high:
                del lows[index], highs[index], openings[index]
            elif sequence_id == low:
                lows[index] = low + 1
            elif sequence_id == high:
                highs[index] = high - 1
            else:
                highs[index] = sequence_id - 1
                lows.insert(index + 1, sequence_id + 1)
                highs.insert(index + 1, high)
                openings.insert(index + 1, openings[index])

    def open(self, floor: int, ids: Sequence[int], opening: Opening) -> None:
        """The ids above ``floor`` and below the highest of ``ids`` (sorted, the ids one
        stored entry holds) that the entry does not hold become holes.

        ``floor``: the producer's mark before the entry, or the start of the entry's range
        when that is higher (a gap between two entries is not a hole).
        """
        previous = floor
        for sequence_id in ids:
            if previous + 1 < sequence_id:
                self._lows.append(previous + 1)
                self._highs.append(sequence_id - 1)
                self._openings.append(opening)
            previous = max(previous, sequence_id)
        excess = len(self._lows) - MAX_HOLE_RANGES
        if excess > 0:
            del self._lows[:excess], self._highs[:excess], self._openings[:excess]

    def forget_before(self, serial: int) -> None:
        """Forgets the holes opened by entries recorded before ``serial``."""
        openings = self._openings
        count = 0
        while count < len(openings) and openings[count].serial < serial:
            count += 1
        if count:
            del self._lows[:count], self._highs[:count], self._openings[:count]

    def oldest(self) -> Opening | None:
        """The opening of the oldest hole still open."""
        return self._openings[0] if self._openings else None
