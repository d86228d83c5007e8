"""A coordinator on its log (an in-memory managed ledger): endings driven on every
partition and subscription, timeouts, and recovery after a crash."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.errors import ServiceNotReadyError
from dedup_broker.transactions.coordinator import TransactionCoordinator
from dedup_broker.transactions.coordinator_log import LOG_CURSOR, CoordinatorLog, log_ledger_name
from dedup_broker.transactions.coordinator_state import ID_BLOCK, TxnAction, TxnId, TxnStatus
from dedup_broker.transactions.errors import (
    CoordinatorNotReadyError,
    TransactionNotFoundError,
)
from harness.memory_storage import MemoryStorage

LOG = log_ledger_name(0)


class RecordingEnder:
    """Records each ending applied; fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.failing: Exception | None = None

    async def end_on_partition(
        self, topic: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        if self.failing is not None:
            raise self.failing
        self.calls.append(("partition", topic, txn_id, action))

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None:
        if self.failing is not None:
            raise self.failing
        self.calls.append(("subscription", topic, subscription, txn_id, action))


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


async def start(
    storage: MemoryStorage, ender: RecordingEnder, clock: Clock | None = None
) -> TransactionCoordinator:
    ledger = await storage.open_managed_ledger(LOG)
    log = await CoordinatorLog.recover(ledger, 0)
    return TransactionCoordinator(log, ender, clock or Clock())


async def test_a_commit_is_applied_on_every_partition_and_subscription_then_recorded() -> None:
    ender = RecordingEnder()
    coordinator = await start(MemoryStorage(), ender)
    txn = await coordinator.new_txn(timeout_ms=60_000, owner="app")
    await coordinator.add_partitions(txn, ["out-0", "out-1"])
    await coordinator.add_subscriptions(txn, [("in", "sub")])
    ended = await coordinator.end_txn(txn, TxnAction.COMMIT)
    assert ended.status == TxnStatus.COMMITTED
    assert sorted(map(str, ender.calls)) == sorted(
        map(
            str,
            [
                ("partition", "out-0", txn, TxnAction.COMMIT),
                ("partition", "out-1", txn, TxnAction.COMMIT),
                ("subscription", "in", "sub", txn, TxnAction.COMMIT),
            ],
        )
    )
    # Ended: a second commit or abort is TransactionNotFound (as Pulsar answers it),
    # nothing applied again.
    with pytest.raises(TransactionNotFoundError):
        await coordinator.end_txn(txn, TxnAction.COMMIT)
    with pytest.raises(TransactionNotFoundError):
        await coordinator.end_txn(txn, TxnAction.ABORT)
    with pytest.raises(TransactionNotFoundError):
        await coordinator.add_partitions(txn, ["out-2"])
    assert len(ender.calls) == 3
    assert coordinator.get(txn).status == TxnStatus.COMMITTED


async def test_an_ending_that_fails_half_way_stays_under_way_and_is_driven_again() -> None:
    ender = RecordingEnder()
    coordinator = await start(MemoryStorage(), ender)
    txn = await coordinator.new_txn(timeout_ms=60_000)
    await coordinator.add_partitions(txn, ["out-0"])
    ender.failing = ConnectionError("owner of out-0 unreachable")
    with pytest.raises(ConnectionError):
        await coordinator.end_txn(txn, TxnAction.ABORT)
    assert coordinator.get(txn).status == TxnStatus.ABORTING
    ender.failing = None
    await coordinator.resume_endings()
    assert coordinator.get(txn).status == TxnStatus.ABORTED
    assert ender.calls == [("partition", "out-0", txn, TxnAction.ABORT)]


async def test_end_txn_waits_out_a_topic_owner_that_moves() -> None:
    """A retriable failure (the topic's owner is moving) does not fail END_TXN: the
    decided ending is applied again until the topic takes it."""
    ender = RecordingEnder()
    coordinator = await start(MemoryStorage(), ender)
    txn = await coordinator.new_txn(timeout_ms=60_000)
    await coordinator.add_partitions(txn, ["out-0"])
    ender.failing = ServiceNotReadyError("out-0 is moving to another broker")
    ending = asyncio.ensure_future(coordinator.end_txn(txn, TxnAction.COMMIT))
    await asyncio.sleep(1.2)  # two attempts or so
    assert not ending.done()
    ender.failing = None
    assert (await ending).status == TxnStatus.COMMITTED
    assert ender.calls == [("partition", "out-0", txn, TxnAction.COMMIT)]


async def test_open_transactions_past_their_timeout_are_aborted() -> None:
    ender, clock = RecordingEnder(), Clock()
    coordinator = await start(MemoryStorage(), ender, clock)
    short = await coordinator.new_txn(timeout_ms=1_000)
    await coordinator.add_partitions(short, ["out-0"])
    long = await coordinator.new_txn(timeout_ms=60_000)
    clock.now_ms += 1_000
    assert await coordinator.abort_timed_out() == [short]
    assert coordinator.get(short).status == TxnStatus.ABORTED
    assert coordinator.get(long).status == TxnStatus.OPEN
    assert ender.calls == [("partition", "out-0", short, TxnAction.ABORT)]
    with pytest.raises(TransactionNotFoundError):  # its client commits too late, as in Pulsar
        await coordinator.end_txn(short, TxnAction.COMMIT)


async def test_a_restarted_coordinator_finds_every_transaction_as_its_clients_were_told() -> None:
    storage, ender = MemoryStorage(), RecordingEnder()
    coordinator = await start(storage, ender)
    committed = await coordinator.new_txn(timeout_ms=60_000)
    await coordinator.end_txn(committed, TxnAction.COMMIT)
    still_open = await coordinator.new_txn(timeout_ms=60_000)
    await coordinator.add_partitions(still_open, ["out-0"])
    await coordinator.add_subscriptions(still_open, [("in", "sub")])
    committing = await coordinator.new_txn(timeout_ms=60_000)
    await coordinator.add_partitions(committing, ["out-1"])
    ender.failing = ConnectionError("crash before the ending was applied")
    with pytest.raises(ConnectionError):
        await coordinator.end_txn(committing, TxnAction.COMMIT)

    # kill -9: nothing that was only in memory survives.
    ender = RecordingEnder()
    recovered = await start(storage.restarted(), ender)
    assert recovered.get(still_open).partitions == ("out-0",)
    assert recovered.get(still_open).subscriptions == (("in", "sub"),)
    assert recovered.get(committing).status == TxnStatus.COMMITTING
    await recovered.resume_endings()
    assert recovered.get(committing).status == TxnStatus.COMMITTED
    assert ender.calls == [("partition", "out-1", committing, TxnAction.COMMIT)]
    fresh = await recovered.new_txn(timeout_ms=60_000)
    assert fresh.least >= ID_BLOCK  # after the block the crashed owner may have used
    assert fresh not in (committed, still_open, committing)


async def test_the_log_cursor_moves_past_records_no_longer_needed() -> None:
    storage, ender = MemoryStorage(), RecordingEnder()
    coordinator = await start(storage, ender)
    ledger = storage.ledger(LOG)
    cursor = ledger.cursors.opened()[LOG_CURSOR]
    first = await coordinator.new_txn(timeout_ms=60_000)  # after the reservation record
    second = await coordinator.new_txn(timeout_ms=60_000)
    start_mark = cursor.mark_delete_position
    await coordinator.end_txn(second, TxnAction.ABORT)
    assert cursor.mark_delete_position == start_mark  # the reservation still needed
    await coordinator.end_txn(first, TxnAction.COMMIT)
    assert cursor.mark_delete_position == start_mark  # still: the reservation is before both

    # Once a new reservation is written, everything before it that ended is behind.
    for _ in range(ID_BLOCK - 2):
        await coordinator.end_txn(await coordinator.new_txn(60_000), TxnAction.COMMIT)
    live = await coordinator.new_txn(timeout_ms=60_000)  # takes the next block
    assert cursor.mark_delete_position > start_mark
    await coordinator.close()  # the cursor's position persisted (after a crash: replayed)
    recovered = await start(storage.restarted(), RecordingEnder())
    assert [m.txn_id for m in recovered.live()] == [live]
    with pytest.raises(TransactionNotFoundError):
        recovered.get(first)  # trimmed: no admin route shows it any more


async def test_changes_are_written_without_waiting_for_each_other() -> None:
    """A transaction's commit does not hold back the next one's opening: both records
    are on their way at once, and each request is answered once its own is stored."""
    storage, ender = MemoryStorage(), RecordingEnder()
    coordinator = await start(storage, ender)
    first = await coordinator.new_txn(timeout_ms=60_000)  # the id block reserved
    ledger = storage.ledger(LOG)
    ledger.hold_appends = True
    ending = asyncio.ensure_future(coordinator.end_txn(first, TxnAction.COMMIT))
    opening = asyncio.ensure_future(coordinator.new_txn(timeout_ms=60_000))
    await asyncio.sleep(0.01)
    assert len(ledger.pending_appends) == 2  # COMMITTING and the next NEW, together
    assert not ending.done() and not opening.done()
    ledger.hold_appends = False
    for pending in ledger.pending_appends:
        pending.acknowledge()
    second = await opening
    assert (await ending).status == TxnStatus.COMMITTED
    assert coordinator.get(second).status == TxnStatus.OPEN


async def test_a_lost_write_makes_the_coordinator_recover_from_its_log() -> None:
    """A record that failed to be stored leaves the state ahead of the log: the
    coordinator refuses (retriable) until it is recovered, and what it then knows is
    what was stored."""
    storage, ender = MemoryStorage(), RecordingEnder()
    coordinator = await start(storage, ender)
    kept = await coordinator.new_txn(timeout_ms=60_000)
    ledger = storage.ledger(LOG)
    ledger.hold_appends = True
    lost = asyncio.ensure_future(coordinator.add_partitions(kept, ["out-0"]))
    await asyncio.sleep(0.01)
    ledger.pending_appends[0].fail()
    with pytest.raises(CoordinatorNotReadyError):
        await lost
    assert coordinator.broken is not None
    with pytest.raises(CoordinatorNotReadyError):
        await coordinator.new_txn(timeout_ms=60_000)
    ledger.hold_appends = False
    await coordinator.close()
    recovered = await start(storage.restarted(), ender)
    assert recovered.get(kept).partitions == ()  # the lost record is not there
