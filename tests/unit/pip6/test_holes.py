"""Holes: the ids inside a producer's recent entries that were never stored."""

from __future__ import annotations

import pytest

from dedup_broker.pip6 import holes as holes_module
from dedup_broker.pip6.holes import Holes, Opening
from dedup_broker.storage.values import Position


def opening(entry_id: int, serial: int = 0, mark: int | None = None) -> Opening:
    return Opening(Position(3, entry_id), mark, serial)


def test_gaps_inside_an_entry_above_the_mark_become_holes() -> None:
    holes = Holes()
    holes.open(0, [0, 3, 6, 9], opening(0))
    assert holes.ranges() == [(1, 2), (4, 5), (7, 8)]
    assert [i in holes for i in range(11)] == [
        False, True, True, False, True, True, False, True, True, False, False,
    ]  # fmt: skip
    # Only what lies above the floor (the mark before the entry): below, ids may be stored.
    above = Holes()
    above.open(5, [2, 4, 8, 10], opening(1))
    assert above.ranges() == [(6, 7), (9, 9)]


def test_stored_ids_leave_their_holes_splitting_ranges() -> None:
    holes = Holes()
    holes.open(0, [0, 10], opening(0))
    holes.fill([5, 1, 9, 42])
    assert holes.ranges() == [(2, 4), (6, 8)]
    assert holes.intersects(4, 6) and not holes.intersects(9, 20) and not holes.intersects(0, 1)
    holes.fill(range(0, 11))
    assert not holes and holes.oldest() is None


def test_the_oldest_holes_are_forgotten_first() -> None:
    holes = Holes()
    holes.open(0, [0, 2], opening(0, serial=1))
    holes.open(2, [3, 5], opening(1, serial=2))
    holes.fill([4])
    holes.open(5, [6, 8], opening(2, serial=3))
    oldest = holes.oldest()
    assert oldest is not None and oldest.position == Position(3, 0)
    holes.forget_before(3)
    assert holes.ranges() == [(7, 7)]


def test_ranges_per_producer_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holes_module, "MAX_HOLE_RANGES", 3)
    holes = Holes()
    holes.open(0, list(range(0, 20, 2)), opening(0))
    assert holes.ranges() == [(13, 13), (15, 15), (17, 17)]
