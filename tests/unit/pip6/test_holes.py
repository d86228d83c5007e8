"""Holes: the ids inside a producer's recent entries that were never stored."""

from __future__ import annotations

import pytest

from dedup_broker.pip6 import holes as holes_module
from dedup_broker.pip6.holes import Holes, Opening


def opening(serial: int = 0, at: float = 0.0) -> Opening:
    return Opening(serial, at)


def test_gaps_inside_an_entry_above_the_mark_become_holes() -> None:
    holes = Holes()
    holes.open(0, [0, 3, 6, 9], opening())
    assert holes.ranges() == [(1, 2), (4, 5), (7, 8)]
    assert [i in holes for i in range(11)] == [
        False, True, True, False, True, True, False, True, True, False, False,
    ]  # fmt: skip
    # Only what lies above the floor (the mark before the entry): below, ids may be stored.
    above = Holes()
    above.open(5, [2, 4, 8, 10], opening())
    assert above.ranges() == [(6, 7), (9, 9)]
    gap = Holes()  # between the mark and the entry's first id too
    gap.open(5, [9, 10], opening())
    assert gap.ranges() == [(6, 8)]


def test_stored_ids_leave_their_holes_splitting_ranges() -> None:
    holes = Holes()
    holes.open(0, [0, 10], opening())
    holes.fill([5, 1, 9, 42])
    assert holes.ranges() == [(2, 4), (6, 8)]
    assert holes.intersects(4, 6) and not holes.intersects(9, 20) and not holes.intersects(0, 1)
    holes.fill(range(0, 11))
    assert not holes and holes.newest(5) == []


def test_the_oldest_holes_are_forgotten_first() -> None:
    holes = Holes()
    holes.open(0, [0, 2], opening(serial=1, at=10.0))
    holes.open(2, [3, 5], opening(serial=2, at=11.0))
    holes.fill([4])
    holes.open(5, [6, 8], opening(serial=3, at=12.0))
    holes.add(9, 9, opening(serial=4, at=13.0))
    assert holes.newest(2) == [(7, 7), (9, 9)]
    holes.forget_before(2, at=0.0)  # by the count of entries since
    assert holes.ranges() == [(7, 7), (9, 9)]
    holes.forget_before(0, at=12.5)  # by age
    assert holes.ranges() == [(9, 9)]


def test_ranges_per_producer_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holes_module, "MAX_HOLE_RANGES", 3)
    holes = Holes()
    holes.open(0, list(range(0, 20, 2)), opening())
    assert holes.ranges() == [(13, 13), (15, 15), (17, 17)]
