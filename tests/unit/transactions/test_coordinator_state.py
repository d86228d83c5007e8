"""A coordinator's transactions: statuses, ids, timeouts, and recovery from its table."""

from __future__ import annotations

import pytest

from dedup_broker.transactions.coordinator_state import (
    ID_BLOCK,
    CoordinatorState,
    TransactionMeta,
    TxnAction,
    TxnId,
    TxnStatus,
    decode_reservation,
    encode_reservation,
)
from dedup_broker.transactions.errors import (
    CoordinatorNotReadyError,
    InvalidTxnStatusError,
    TransactionNotFoundError,
)

T0 = 1_700_000_000_000


def coordinator(coordinator_id: int = 3) -> CoordinatorState:
    state = CoordinatorState(coordinator_id)
    until = state.reservation_needed()
    assert until == ID_BLOCK
    state.reserved(until)
    return state


def opened(state: CoordinatorState, now_ms: int = T0, timeout_ms: int = 10_000) -> TxnId:
    meta = state.open(now_ms, timeout_ms, owner="app")
    state.apply(meta)
    return meta.txn_id


def test_a_transaction_commits_with_its_partitions_and_subscriptions_in_order() -> None:
    state = coordinator()
    txn = opened(state)
    assert txn == TxnId(3, 0) and str(txn) == "(3,0)"
    added = state.add_partitions(txn, ["t-1", "t-0", "t-1"], T0 + 1)
    assert added is not None and added.partitions == ("t-1", "t-0")
    state.apply(added)
    assert state.add_partitions(txn, ["t-0"], T0 + 2) is None  # nothing new: no write
    subs = state.add_subscriptions(txn, [("in", "s"), ("in", "s")], T0 + 3)
    assert subs is not None and subs.subscriptions == (("in", "s"),)
    state.apply(subs)

    committing = state.end(txn, TxnAction.COMMIT, T0 + 4)
    assert committing is not None and committing.status == TxnStatus.COMMITTING
    state.apply(committing)
    assert state.ending() == [committing]
    with pytest.raises(InvalidTxnStatusError, match="COMMITTING"):
        state.add_partitions(txn, ["t-2"], T0 + 5)

    committed = state.finished(txn, T0 + 6)
    assert committed.status == TxnStatus.COMMITTED
    assert committed.partitions == ("t-1", "t-0")
    assert committed.subscriptions == (("in", "s"),)
    state.apply(committed)
    assert state.live() == [] and state.ending() == []


def test_a_retried_end_is_answered_the_other_action_refused_an_ended_one_not_found() -> None:
    """While ending, the same action again is taken, the other refused; once ended, the
    transaction is unknown to every request (Pulsar's coordinator forgets it: a second
    commit or abort is ``TransactionNotFound``), yet still shown by the admin routes."""
    state = coordinator()
    txn = opened(state)
    aborting = state.end(txn, TxnAction.ABORT, T0)
    assert aborting is not None
    state.apply(aborting)
    assert state.end(txn, TxnAction.ABORT, T0 + 1) is None  # under way: nothing to write
    with pytest.raises(InvalidTxnStatusError, match="cannot commit"):
        state.end(txn, TxnAction.COMMIT, T0 + 1)
    state.apply(state.finished(txn, T0 + 2))
    for request in (
        lambda: state.end(txn, TxnAction.ABORT, T0 + 3),
        lambda: state.end(txn, TxnAction.COMMIT, T0 + 3),
        lambda: state.add_partitions(txn, ["t"], T0 + 3),
        lambda: state.add_subscriptions(txn, [("t", "s")], T0 + 3),
    ):
        with pytest.raises(TransactionNotFoundError, match=r"\(3,0\)"):
            request()
    assert state.get(txn).status == TxnStatus.ABORTED
    with pytest.raises(InvalidTxnStatusError, match="not ending"):
        state.finished(txn, T0 + 4)


def test_unknown_transactions_are_not_found() -> None:
    state = coordinator()
    unknown = TxnId(3, 99)
    for request in (
        lambda: state.add_partitions(unknown, ["t"], T0),
        lambda: state.add_subscriptions(unknown, [("t", "s")], T0),
        lambda: state.end(unknown, TxnAction.COMMIT, T0),
    ):
        with pytest.raises(TransactionNotFoundError, match=r"\(3,99\)"):
            request()


def test_open_transactions_past_their_timeout_are_reported_for_abort() -> None:
    state = coordinator()
    short = opened(state, timeout_ms=1_000)
    long = opened(state, timeout_ms=60_000)
    ending = opened(state, timeout_ms=1_000)
    committing = state.end(ending, TxnAction.COMMIT, T0 + 10)
    assert committing is not None
    state.apply(committing)
    assert state.timed_out(T0 + 999) == []
    assert state.timed_out(T0 + 1_000) == [short]
    assert state.timed_out(T0 + 60_000) == [short, long]


def test_ids_need_a_reservation_and_a_recovered_coordinator_never_reuses_one() -> None:
    state = CoordinatorState(1)
    with pytest.raises(CoordinatorNotReadyError):
        state.open(T0, 1_000)
    state.reserved(2)
    first, second = (opened(state) for _ in range(2))
    assert (first.least, second.least) == (0, 1)
    assert state.reservation_needed() == 2 + ID_BLOCK
    with pytest.raises(CoordinatorNotReadyError):
        state.open(T0, 1_000)
    state.reserved(2 + ID_BLOCK)
    handed_out_unpersisted = state.open(T0, 1_000)  # its write failed: id skipped, not reused
    assert handed_out_unpersisted.txn_id.least == 2
    assert opened(state).least == 3

    # A new owner replays the table: the live transactions, and the last reservation.
    table = [state.get(first), state.get(second)]
    recovered = CoordinatorState(1)
    recovered.recover(
        [TransactionMeta.decode(m.encode()) for m in table],
        decode_reservation(encode_reservation(2 + ID_BLOCK)),
    )
    assert recovered.live() == table
    assert recovered.reservation_needed() == 2 + 2 * ID_BLOCK
    recovered.reserved(2 + 2 * ID_BLOCK)
    assert opened(recovered).least == 2 + ID_BLOCK


def test_the_low_watermark_is_below_the_oldest_live_transaction() -> None:
    state = coordinator()
    assert state.low_watermark == -1
    first, second = opened(state), opened(state)
    assert state.low_watermark == -1
    state.apply(state.end(first, TxnAction.ABORT, T0) or state.get(first))
    state.apply(state.finished(first, T0))
    assert state.low_watermark == first.least  # every id up to it has ended
    state.apply(state.end(second, TxnAction.COMMIT, T0) or state.get(second))
    state.apply(state.finished(second, T0))
    assert state.low_watermark == second.least


def test_metadata_survives_its_encoding() -> None:
    meta = TransactionMeta(
        TxnId(2, 7),
        TxnStatus.ABORTING,
        T0,
        5_000,
        T0 + 9,
        "role",
        ("persistent://t/n/a-partition-0",),
        (("persistent://t/n/b", "sub"),),
    )
    assert TransactionMeta.decode(meta.encode()) == meta
    assert meta.deadline_ms == T0 + 5_000 and not meta.ended
    assert meta.txn_id.key == b"txn:2:7"
