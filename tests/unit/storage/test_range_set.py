"""Individually acknowledged positions as ranges."""

from __future__ import annotations

import pytest

from dedup_broker.storage.cursor.range_set import PositionRangeSet
from dedup_broker.storage.values import Position

P = Position


def test_adjacent_positions_merge_within_a_ledger_only() -> None:
    ranges = PositionRangeSet()
    for entry in (5, 7, 6, 9):
        assert ranges.add(P(1, entry))
    assert ranges.add(P(2, 0))
    assert list(ranges) == [(P(1, 5), P(1, 7)), (P(1, 9), P(1, 9)), (P(2, 0), P(2, 0))]
    assert len(ranges) == 5
    assert ranges.range_count() == 3


def test_duplicates_and_overlaps() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(P(1, 2), P(1, 4))
    assert not ranges.add(P(1, 3))
    assert ranges.add_range(P(1, 0), P(1, 10))
    assert list(ranges) == [(P(1, 0), P(1, 10))]
    assert len(ranges) == 11
    with pytest.raises(ValueError):
        ranges.add_range(P(1, 5), P(2, 1))


def test_contains_and_range_containing() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(P(3, 4), P(3, 6))
    assert P(3, 4) in ranges and P(3, 6) in ranges
    assert P(3, 3) not in ranges and P(3, 7) not in ranges and P(4, 5) not in ranges
    assert ranges.range_containing(P(3, 5)) == (P(3, 4), P(3, 6))
    assert ranges.range_containing(P(3, 7)) is None


def test_remove_up_to_trims_and_drops() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(P(1, 0), P(1, 3))
    ranges.add_range(P(1, 6), P(1, 9))
    ranges.add_range(P(2, 0), P(2, 1))
    ranges.remove_up_to(P(1, 7))
    assert list(ranges) == [(P(1, 8), P(1, 9)), (P(2, 0), P(2, 1))]
    assert len(ranges) == 4
    ranges.remove_up_to(P(1, 100))
    assert list(ranges) == [(P(2, 0), P(2, 1))]
    assert len(ranges) == 2


def test_pop_first_and_count_between() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(P(1, 0), P(1, 3))
    ranges.add_range(P(2, 5), P(2, 9))
    assert ranges.count_between(P(1, 2), P(2, 6)) == 4
    assert ranges.count_between(P(2, 10), P(3, 0)) == 0
    assert ranges.pop_first() == (P(1, 0), P(1, 3))
    assert len(ranges) == 5
    ranges.clear()
    assert not ranges and len(ranges) == 0


def test_first_after() -> None:
    ranges = PositionRangeSet()
    ranges.add_range(P(1, 4), P(1, 6))
    ranges.add_range(P(2, 0), P(2, 0))
    assert ranges.first_after(P(1, 0)) == (P(1, 4), P(1, 6))
    assert ranges.first_after(P(1, 4)) == (P(2, 0), P(2, 0))
    assert ranges.first_after(P(2, 0)) is None


def test_empty_sets_share_nothing_once_written() -> None:
    first, second = PositionRangeSet(), PositionRangeSet()
    second.clear()
    second.remove_up_to(P(1, 5))
    assert first.add_range(P(1, 1), P(1, 3))
    assert list(first) == [(P(1, 1), P(1, 3))] and len(first) == 3
    assert list(second) == [] and len(second) == 0 and P(1, 2) not in second
    assert list(PositionRangeSet()) == []
