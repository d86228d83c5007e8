"""One subscription's acknowledgements held in transactions: conflicts as Pulsar defines
them, what is held back from delivery, and what an ending releases."""

from __future__ import annotations

import pytest

from dedup_broker.storage.api import Position
from dedup_broker.transactions.coordinator_state import TxnId
from dedup_broker.transactions.pending_acks import (
    HeldAcks,
    PendingAcks,
    TransactionConflictError,
)

T1, T2 = TxnId(0, 1), TxnId(0, 2)
P = [Position(3, i) for i in range(6)]


def test_a_message_held_by_one_transaction_conflicts_in_another() -> None:
    held = PendingAcks()
    held.hold(T1, HeldAcks(whole={P[1]}))
    held.check(T1, HeldAcks(whole={P[1]}), acknowledged=set())  # the same one again: fine
    with pytest.raises(TransactionConflictError, match="transaction"):
        held.check(T2, HeldAcks(whole={P[1]}), acknowledged=set())
    with pytest.raises(TransactionConflictError, match="already"):
        held.check(T2, HeldAcks(whole={P[2]}), acknowledged={P[2]})
    assert held.holds(P[1]) and not held.holds(P[2])
    assert held.release(T1) == HeldAcks(whole={P[1]})
    assert not held.holds(P[1])
    held.check(T2, HeldAcks(whole={P[1]}), acknowledged=set())


def test_a_cumulative_acknowledgement_holds_everything_up_to_it() -> None:
    held = PendingAcks()
    held.hold(T1, HeldAcks(cumulative=P[3]))
    assert [held.holds(p) for p in P] == [True, True, True, True, False, False]
    with pytest.raises(TransactionConflictError):
        held.check(T2, HeldAcks(cumulative=P[5]), acknowledged=set())
    held.release(T1)
    assert not any(held.holds(p) for p in P)


def test_batch_parts_of_one_transaction_combine() -> None:
    acks = HeldAcks(parts={P[0]: (0b1110,)})
    acks.merge(HeldAcks(parts={P[0]: (0b1011,)}, whole={P[1]}))
    assert acks == HeldAcks(whole={P[1]}, parts={P[0]: (0b1010,)})
    assert HeldAcks.decode(acks.encode()) == acks
