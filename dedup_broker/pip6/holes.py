"""Sequence ids below a producer's mark that were never stored: the gaps its recent
entries left.

A high-water mark judges every id at or below it a duplicate. Key-based batching breaks
that for ids a live producer has not sent yet: the client splits one run of ids into a
batch per key (key A: 0, 3, 6; key B: 1, 4, 7; key C: 2, 5, 8) and sends them one after
the other, the C++-based clients in the order of their lowest ids, the Java client in
the order of their highest. Once the first is stored the mark is above ids of the
others, which would pass for duplicates. So every id an entry leaves out between the
mark the producer had before it and the entry's highest id is kept as a hole, and a
later message carrying an id in a hole is new: nothing stored earlier can hold it
(every id stored before the entry is at or below that mark, or was itself in a hole
and left it), and it leaves the hole once it is stored.

Forgetting a hole is always safe for "at most once" (a late id in it is then a
duplicate, as under a plain high-water mark), so holes are bounded: the ranges opened by
the oldest entries go first, beyond ``MAX_HOLE_RANGES`` per producer, once
``HOLE_MEMORY_ENTRIES`` entries of the topic followed them, or after
``HOLE_MEMORY_SECONDS``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_HOLE_RANGES = 4096
"""Ranges kept per producer (key-based batching with K keys opens up to one per message
of a batch; the next K - 1 batches close them)."""

HOLE_MEMORY_ENTRIES = 10_000
"""Entries of the topic after which the holes an entry opened are forgotten: a key-based
flush sends its batches back to back, so they are closed long before."""

HOLE_MEMORY_SECONDS = 60.0
"""And the time after which they are (a quiet topic's holes go too)."""


@dataclass(frozen=True, slots=True)
class Opening:
    """When some holes were opened, to forget them in time."""

    serial: int
    """The topic's count of recorded entries when they were opened."""
    at: float
    """When they were opened (monotonic seconds)."""


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
        """The ids above ``floor`` (the producer's mark before a stored entry) and below
        the highest of ``ids`` (sorted, the ids the entry holds) that the entry does not
        hold become holes."""
        previous = floor
        for sequence_id in ids:
            if previous + 1 < sequence_id:
                self.add(previous + 1, sequence_id - 1, opening)
            previous = max(previous, sequence_id)

    def add_first(self, low: int, high: int, opening: Opening) -> None:
        """``low..high`` (below every hole already kept, opened before them) becomes a
        hole."""
        self._lows.insert(0, low)
        self._highs.insert(0, high)
        self._openings.insert(0, opening)

    def add(self, low: int, high: int, opening: Opening) -> None:
        """``low..high`` (above every hole already kept) becomes a hole."""
        self._lows.append(low)
        self._highs.append(high)
        self._openings.append(opening)
        if len(self._lows) > MAX_HOLE_RANGES:
            del self._lows[0], self._highs[0], self._openings[0]

    def forget_before(self, serial: int, at: float) -> None:
        """Forgets the holes opened by entries recorded before ``serial`` or ``at``."""
        openings = self._openings
        count = 0
        while count < len(openings) and (
            openings[count].serial < serial or openings[count].at < at
        ):
            count += 1
        if count:
            del self._lows[:count], self._highs[:count], self._openings[:count]

    def newest(self, count: int) -> list[tuple[int, int]]:
        """The ``count`` most recently opened ranges, lowest first."""
        if count <= 0:
            return []
        return list(zip(self._lows[-count:], self._highs[-count:], strict=True))
