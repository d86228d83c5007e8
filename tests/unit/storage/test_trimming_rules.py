"""Which ledgers trimming deletes: cursors, the current ledger, retention (Pulsar's rules)."""

from __future__ import annotations

from dedup_broker.storage.ledger.deletion import consumed_ledgers
from dedup_broker.storage.values import MB, LedgerInfo, Position, Retention

NOW = 10_000_000
LEDGERS = [
    LedgerInfo(1, 10, 1 * MB, NOW - 600_000),
    LedgerInfo(2, 10, 1 * MB, NOW - 300_000),
    LedgerInfo(5, 0, 0, NOW - 200_000),
    LedgerInfo(7, 10, 1 * MB, NOW - 60_000),
    LedgerInfo(9, -1, 0, 0),
]


def test_only_ledgers_every_cursor_passed_are_deleted() -> None:
    none = Retention(0, 0)
    assert consumed_ledgers(LEDGERS, Position(1, 8), none, NOW) == []
    assert consumed_ledgers(LEDGERS, Position(1, 9), none, NOW) == [1]
    assert consumed_ledgers(LEDGERS, Position(7, 3), none, NOW) == [1, 2, 5]
    assert consumed_ledgers(LEDGERS, Position(9, -1), none, NOW) == [1, 2, 5, 7]


def test_the_current_ledger_is_never_deleted() -> None:
    assert 9 not in consumed_ledgers(LEDGERS, Position(9, 100), Retention(0, 0), NOW)
    closed_last = [*LEDGERS[:-1]]
    assert 7 not in consumed_ledgers(closed_last, Position(7, 9), Retention(0, 0), NOW)


def test_without_durable_cursors_every_closed_ledger_counts_as_consumed() -> None:
    assert consumed_ledgers(LEDGERS, None, Retention(0, 0), NOW) == [1, 2, 5, 7]


def test_time_retention_keeps_recent_ledgers() -> None:
    # 4 minutes: ledgers closed 10 and 5 minutes ago go, the rest stays.
    assert consumed_ledgers(LEDGERS, Position(9, -1), Retention(4, -1), NOW) == [1, 2]
    assert consumed_ledgers(LEDGERS, Position(9, -1), Retention(20, -1), NOW) == []


def test_size_retention_keeps_the_newest_data() -> None:
    # 3 MB in total; keep at most 1 MB: ledgers 1 and 2 go (then 1 MB remains).
    assert consumed_ledgers(LEDGERS, Position(9, -1), Retention(-1, 1), NOW) == [1, 2]
    assert consumed_ledgers(LEDGERS, Position(9, -1), Retention(-1, 3), NOW) == []


def test_either_limit_exceeded_deletes_and_both_unlimited_keeps_everything() -> None:
    assert consumed_ledgers(LEDGERS, Position(9, -1), Retention(20, 1), NOW) == [1, 2]
    assert consumed_ledgers(LEDGERS, Position(9, -1), Retention(-1, -1), NOW) == []


def test_with_lazy_ledgers_a_consumed_closed_last_ledger_goes_too() -> None:
    """``managedLedgerInactiveLedgerRolloverTimeSeconds``: an idle ledger closed, and the
    next append creates the next one, so the last ledger may go once consumed."""
    closed_last = [*LEDGERS[:-1]]
    none = Retention(0, 0)
    assert consumed_ledgers(closed_last, Position(7, 9), none, NOW, last_may_go=True) == [
        1,
        2,
        5,
        7,
    ]
    assert consumed_ledgers(closed_last, Position(7, 8), none, NOW, last_may_go=True) == [1, 2, 5]
    # An open last ledger stays whatever the cursors say.
    assert consumed_ledgers(LEDGERS, Position(9, 100), none, NOW, last_may_go=True) == [1, 2, 5, 7]
