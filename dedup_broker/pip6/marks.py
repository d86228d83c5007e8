"""Each producer's sequence-id marks on one topic: what is stored, what is being written,
and the holes below the marks (``pip6.holes``).

Two maps ``producer_name -> sequence_id``: *pushed* is raised when a SEND is admitted
(before its Kafka write) so that a resend racing the original is caught while it is in
flight, and is kept as its differences from *persisted*, raised when Kafka acknowledged
the write, so only what is durably stored is ever answered as a duplicate.

A SEND is judged message by message: the ids at or below persisted (and in no hole) are
stored already, the others are new. A SEND that is all one or the other is a duplicate or
new as a whole; a SEND that is both (a producer restarted from a checkpoint, its batch
holding ids it had stored and ids it had not) is *partly* a duplicate, and only its new
messages are written. Nothing is judged against a write still in flight: such a SEND
waits for it (Unknown).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dedup_broker.pip6.holes import HOLE_MEMORY_ENTRIES, HOLE_MEMORY_SECONDS, Holes, Opening
from dedup_broker.pip6.verdicts import Verdict

_NOTHING_AHEAD: dict[str, int] = {}
"""Shared by every topic with no write admitted and not yet acknowledged."""
_NO_HOLES: dict[str, Holes] = {}
"""Shared by every topic whose producers have no holes (most)."""
_NO_FRESH: dict[str, tuple[int, Opening]] = {}
"""Shared by every topic with no producer seen for the first time lately."""
_HOLE = "\x00"
MAX_SNAPSHOT_HOLES = 10_000
"""Hole ranges a snapshot stores at the most (the most recent of each producer)."""


def producer_marks(properties: dict[str, int]) -> dict[str, int]:
    """The producers' marks among a snapshot's properties (its holes left out)."""
    return {name: value for name, value in properties.items() if not name.startswith(_HOLE)}


def hole_property(producer_name: str, low: int) -> str:
    """The snapshot property of a producer's hole from ``low`` (its value: the hole's
    highest id); a producer name never starts with a NUL."""
    return f"{_HOLE}{producer_name}{_HOLE}{low}"


@dataclass(frozen=True, slots=True)
class ReplayedEntry:
    """An entry a replay read that may open or close holes: its ids are not one run
    right after the producer's mark at that point."""

    producer_name: str
    lowest: int
    highest: int
    ids: tuple[int, ...] | None
    """The entry's ids when they are not exactly ``lowest..highest``."""
    mark_before: int | None


class SequenceMarks:
    """Persisted and pushed marks and holes of every producer of one topic.

    Nothing here yields: a check and the admission it makes are atomic on the loop.
    """

    __slots__ = ("_ahead", "_clock", "_fresh", "_holes", "_serial", "persisted")

    def __init__(
        self,
        persisted: dict[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.persisted: dict[str, int] = persisted if persisted is not None else {}
        self._ahead = _NOTHING_AHEAD
        """Pushed, for the producers with an admitted write not yet acknowledged (pushed
        is persisted for all others, so an idle topic keeps one map, not two)."""
        self._holes = _NO_HOLES
        self._fresh = _NO_FRESH
        """New producers' first ids: every id below one is a hole for a while (the Java
        client's first key-based batches go out by their highest ids). Kept apart from the
        holes, in memory only, so that a producer starting at 1 costs one dict item."""
        self._serial = 0
        """Entries recorded so far (holes are forgotten by this count)."""

    # --- verdicts -------------------------------------------------------------------
    def check(self, name: str, low: int, high: int, failed: bool, holes: bool = True) -> Verdict:
        """The verdict for a SEND covering ``low..high``; NOT_DUP admits it (pushed is
        raised), PARTLY_DUP asks the caller for its ids (:meth:`admit_part`).

        ``failed``: a write failed and its outcome is not known yet: nothing new is
        admitted (a write admitted now could still be in flight when pushed is reset).
        ``holes``: False to judge by the mark alone.
        """
        persisted = self.persisted.get(name)
        ahead = self._ahead.get(name)
        pushed = persisted if ahead is None else ahead
        if pushed is None or low > pushed:
            if failed:
                return Verdict.UNKNOWN
            self._admit(name, high)
            return Verdict.NOT_DUP
        stored = persisted is not None and high <= persisted
        if stored and not (holes and self.in_hole(name, low, high)):
            return Verdict.DUP
        if ahead is not None or failed:
            return Verdict.UNKNOWN
        return Verdict.PARTLY_DUP

    def keep_of(self, name: str, ids: list[int]) -> list[bool]:
        """After PARTLY_DUP, with the SEND's ids in its order: which messages are new."""
        persisted = self.persisted[name]
        holes = self._holes.get(name)
        fresh = self._fresh.get(name)
        below = fresh[0] if fresh is not None else None
        return [
            i > persisted or (holes is not None and i in holes) or (below is not None and i < below)
            for i in ids
        ]

    def admit_part(self, name: str, highest_kept: int) -> None:
        """The new messages of a PARTLY_DUP SEND are being written."""
        self._admit(name, max(self.persisted[name], highest_kept))

    def _admit(self, name: str, pushed: int) -> None:
        if self._ahead is _NOTHING_AHEAD:
            self._ahead = {}
        self._ahead[name] = pushed

    def in_hole(self, name: str, low: int, high: int) -> bool:
        """True when some id of ``low..high`` is one of the producer's holes."""
        holes = self._holes.get(name)
        if holes is not None and holes.intersects(low, high):
            return True
        fresh = self._fresh.get(name)
        return fresh is not None and low < fresh[0]

    def pushed(self, name: str) -> int | None:
        """The highest id admitted (written or being written), None if none is known."""
        return self._ahead.get(name, self.persisted.get(name))

    def in_flight(self, name: str) -> bool:
        return name in self._ahead

    def reset_pushed(self) -> None:
        """Nothing is in flight any more (a failed write was resolved)."""
        self._ahead = _NOTHING_AHEAD

    # --- what was stored ----------------------------------------------------------
    def record(self, name: str, low: int, high: int, ids: tuple[int, ...] | None) -> bool:
        """An entry of ``name`` is stored; True when it raised the producer's mark."""
        self._serial += 1
        previous = self.persisted.get(name)
        # The common entry: the run right after the mark, no holes to close.
        if (
            ids is not None
            or previous is None
            or low != previous + 1
            or name in self._holes
            or name in self._fresh
        ):
            self._update_holes(name, low, high, ids, previous)
        raised = previous is None or high > previous
        if raised:
            self.persisted[name] = high
        ahead = self._ahead
        if name in ahead and ahead[name] <= self.persisted[name]:
            self.settle(name)
        return raised

    def settle(self, name: str) -> None:
        """Pushed is persisted again once persisted has caught up with it."""
        ahead = self._ahead.get(name)
        persisted = self.persisted.get(name)
        if ahead is not None and persisted is not None and ahead <= persisted:
            del self._ahead[name]
            if not self._ahead:
                self._ahead = _NOTHING_AHEAD

    def raise_to(self, name: str, sequence: int) -> bool:
        """A replay read ``sequence`` of ``name`` stored; True when it raised the mark."""
        previous = self.persisted.get(name)
        if previous is not None and sequence <= previous:
            return False
        self.persisted[name] = sequence
        return True

    def replayed(self, entries: list[ReplayedEntry], count: int) -> None:
        """A replay's irregular entries, in order, out of ``count`` entries read (the
        marks themselves are raised by the caller)."""
        for entry in entries:
            self._update_holes(
                entry.producer_name, entry.lowest, entry.highest, entry.ids, entry.mark_before
            )
        self._serial += count

    def _update_holes(
        self,
        name: str,
        low: int,
        high: int,
        ids: tuple[int, ...] | None,
        before: int | None,
    ) -> None:
        fresh = self._fresh.get(name)
        if fresh is not None and low < fresh[0]:  # ids below its first one come now
            del self._fresh[name]
            self._holes_for(name).add_first(min(0, low), fresh[0] - 1, fresh[1])
        holes = self._holes.get(name)
        if holes is not None and before is not None and low <= before:
            holes.fill(ids if ids is not None else range(low, high + 1))
            if not holes:
                del self._holes[name]
        floor = low if before is None else before
        if before is None and low > 0:
            if self._fresh is _NO_FRESH:
                self._fresh = {}
            self._fresh[name] = (low, Opening(self._serial, self._clock()))
        if high <= floor or (ids is None and low <= floor + 1):
            return  # nothing above the mark left out
        opening = Opening(self._serial, self._clock())
        if ids is None:
            self._holes_for(name).add(floor + 1, low - 1, opening)
            return
        holes = self._holes_for(name)
        holes.open(floor, sorted(ids), opening)
        if not holes:
            del self._holes[name]

    # --- snapshots and housekeeping -------------------------------------------------
    def snapshot(self, producers: dict[str, int]) -> dict[str, int]:
        """What a snapshot stores for ``producers`` (their marks): the marks, and their
        most recent holes (at most ``MAX_SNAPSHOT_HOLES``) under names of their own."""
        self.forget_old_holes()
        if not self._holes:
            return producers
        stored = dict(producers)
        room = MAX_SNAPSHOT_HOLES
        for name in sorted(self._holes.keys() & producers.keys()):
            for low, high in self._holes[name].newest(room):
                stored[hole_property(name, low)] = high
                room -= 1
        return stored

    @classmethod
    def restored(
        cls, properties: dict[str, int], clock: Callable[[], float] = time.monotonic
    ) -> SequenceMarks:
        """The marks and holes a snapshot stored."""
        marks = cls(producer_marks(properties), clock)
        opened = Opening(0, clock())
        for key, high in sorted(
            ((k, v) for k, v in properties.items() if k.startswith(_HOLE)),
            key=lambda item: int(item[0].rsplit(_HOLE, 1)[1]),
        ):
            name, low = key[1:].rsplit(_HOLE, 1)
            if name in marks.persisted:
                marks._holes_for(name).add(int(low), high, opened)
        return marks

    def _holes_for(self, name: str) -> Holes:
        holes = self._holes.get(name)
        if holes is None:
            if self._holes is _NO_HOLES:
                self._holes = {}
            holes = self._holes[name] = Holes()
        return holes

    def forget_old_holes(self) -> None:
        serial, at = self._serial - HOLE_MEMORY_ENTRIES, self._clock() - HOLE_MEMORY_SECONDS
        for name in list(self._holes):
            holes = self._holes[name]
            holes.forget_before(serial, at)
            if not holes:
                del self._holes[name]
        for name, (_, opened) in list(self._fresh.items()):
            if opened.serial < serial or opened.at < at:
                del self._fresh[name]

    def forget(self, name: str) -> None:
        """An inactive producer: its marks and holes go."""
        self.persisted.pop(name, None)
        if name in self._holes:
            del self._holes[name]
        if name in self._fresh:
            del self._fresh[name]

    def holes_of(self, name: str) -> list[tuple[int, int]]:
        """A producer's holes (those below a new producer's first id from 0)."""
        holes = self._holes.get(name)
        fresh = self._fresh.get(name)
        below = [(0, fresh[0] - 1)] if fresh is not None else []
        return below + (holes.ranges() if holes is not None else [])

    def producer_names(self) -> set[str]:
        return self.persisted.keys() | self._ahead.keys()
