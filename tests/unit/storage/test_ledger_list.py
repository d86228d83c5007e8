"""Position arithmetic over a managed ledger's ledgers."""

from __future__ import annotations

import pytest

from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.values import LedgerInfo, Position

P = Position


def make() -> LedgerList:
    """Ledgers 3 (3 entries), 5 (closed empty), 7 (2 entries), 9 (open, 1 acked entry)."""
    ledgers = LedgerList(
        [
            LedgerInfo(3, 3, 30, 1000),
            LedgerInfo(5, 0, 0, 2000),
            LedgerInfo(7, 2, 20, 3000),
            LedgerInfo(9, -1, 0, 0),
        ]
    )
    ledgers.add_confirmed(11)
    return ledgers


def test_position_str_and_order() -> None:
    assert str(P(12, 34)) == "12:34"
    assert sorted([P(2, 0), P(1, 5), P(1, -1)]) == [P(1, -1), P(1, 5), P(2, 0)]


def test_first_last_and_counts() -> None:
    ledgers = make()
    assert ledgers.first_position() == P(3, 0)
    assert ledgers.before_first() == P(3, -1)
    assert ledgers.last_confirmed() == P(9, 0)
    assert ledgers.number_of_entries() == 6
    assert ledgers.total_size() == 61
    assert ledgers.count(7) == 2
    assert ledgers.count(4) is None
    assert ledgers.infos() == [
        LedgerInfo(3, 3, 30, 1000),
        LedgerInfo(5, 0, 0, 2000),
        LedgerInfo(7, 2, 20, 3000),
        LedgerInfo(9, -1, 11, 0),
    ]


def test_next_position_crosses_ledgers_and_skips_empty_ones() -> None:
    ledgers = make()
    assert ledgers.next_position(P(3, 0)) == P(3, 1)
    assert ledgers.next_position(P(3, 2)) == P(7, 0)
    assert ledgers.next_position(P(7, 1)) == P(9, 0)
    # The open ledger: positions past the acknowledged ones are "next to write".
    assert ledgers.next_position(P(9, 0)) == P(9, 1)
    assert ledgers.next_position(P(3, -1)) == P(3, 0)
    # Unknown ledgers continue with the following existing one.
    assert ledgers.next_position(P(1, 7)) == P(3, 0)
    assert ledgers.next_position(P(6, 0)) == P(7, 0)


def test_previous_position() -> None:
    ledgers = make()
    assert ledgers.previous_position(P(3, 2)) == P(3, 1)
    assert ledgers.previous_position(P(7, 0)) == P(3, 2)
    assert ledgers.previous_position(P(9, 0)) == P(7, 1)
    assert ledgers.previous_position(P(9, 5)) == P(9, 0)
    assert ledgers.previous_position(P(3, 0)) == P(3, -1)
    assert ledgers.previous_position(P(1, 0)) == P(3, -1)
    assert ledgers.previous_position(P(6, 0)) == P(3, 2)


def test_exists_and_normalize() -> None:
    ledgers = make()
    assert ledgers.exists(P(3, 0)) and ledgers.exists(P(7, 1)) and ledgers.exists(P(9, 0))
    assert not ledgers.exists(P(3, 3))
    assert not ledgers.exists(P(5, 0))
    assert not ledgers.exists(P(9, 1))
    assert not ledgers.exists(P(3, -1))
    assert ledgers.normalize(P(3, 3)) == P(7, 0)
    assert ledgers.normalize(P(3, -1)) == P(3, 0)
    assert ledgers.normalize(P(5, 0)) == P(7, 0)
    assert ledgers.normalize(P(9, 4)) == P(9, 4)
    assert ledgers.normalize(P(-1, -1)) == P(3, 0)


def test_entries_between() -> None:
    ledgers = make()
    assert ledgers.entries_between(P(3, 0), P(9, 0)) == 6
    assert ledgers.entries_between(P(3, 1), P(7, 0)) == 3
    assert ledgers.entries_between(P(3, -1), P(3, 0)) == 1
    assert ledgers.entries_between(P(7, 0), P(3, 0)) == 0
    assert ledgers.entries_between(P(4, 0), P(8, 0)) == 2
    assert ledgers.entries_between(P(9, 1), P(9, 9)) == 0


def test_empty_managed_ledger() -> None:
    ledgers = LedgerList([LedgerInfo(4, -1, 0, 0)])
    assert ledgers.last_confirmed() == P(4, -1)
    assert ledgers.first_position() == P(4, 0)
    assert ledgers.before_first() == P(4, -1)
    assert ledgers.next_position(ledgers.last_confirmed()) == P(4, 0)
    assert ledgers.number_of_entries() == 0


def test_close_and_add_ledger() -> None:
    ledgers = make()
    ledgers.add_confirmed(5)
    closed = ledgers.close_current(2, 16, 4000)
    assert closed == LedgerInfo(9, 2, 16, 4000)
    assert ledgers.current is None
    ledgers.add_open_ledger(12)
    assert ledgers.current == LedgerInfo(12, -1, 0, 0)
    assert ledgers.last_confirmed() == P(9, 1)
    assert ledgers.next_position(P(9, 1)) == P(12, 0)
    with pytest.raises(ValueError):
        ledgers.add_open_ledger(13)
    ledgers.remove([5, 7])
    assert ledgers.ledger_ids() == [3, 9, 12]


def test_only_last_ledger_may_be_open_and_ids_increase() -> None:
    with pytest.raises(ValueError):
        LedgerList([LedgerInfo(1, -1, 0, 0), LedgerInfo(2, -1, 0, 0)])
    with pytest.raises(ValueError):
        LedgerList([LedgerInfo(2, 1, 1, 1), LedgerInfo(1, 1, 1, 1)])
