"""Snapshots on the dedup cursor, inactivity pruning, stats and close."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from dedup_fakes import make_dedup, message, snapshots

from dedup_broker.errors import StorageError
from dedup_broker.pip6.marks import producer_marks
from dedup_broker.pip6.state import DEDUP_CURSOR, MessageDeduplication, Verdict
from dedup_broker.storage.values import Position
from harness.memory_ledger import MemoryLedger


def publish(dedup: MessageDeduplication, ledger: MemoryLedger, producer: str, seq: int) -> Position:
    """One admitted SEND, stored and acknowledged."""
    assert dedup.check(producer, seq, seq) is Verdict.NOT_DUP
    position = ledger.add_entry(message(producer, seq))
    dedup.on_persisted(producer, seq, position)
    return position


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("dedup_broker.pip6.") and r.levelno >= logging.WARNING
    ]


async def settle() -> None:
    """Lets background snapshot tasks run as far as they can."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_entries_interval_starts_a_snapshot_of_the_persisted_map() -> None:
    dedup, ledger, _ = make_dedup(broker_deduplication_entries_interval=3)
    await dedup.enable()
    publish(dedup, ledger, "p", 0)
    publish(dedup, ledger, "q", 7)
    await settle()
    assert snapshots(ledger) == []
    third = publish(dedup, ledger, "p", 1)
    await settle()
    assert len(snapshots(ledger)) == 1
    stored = ledger.stored_cursor(DEDUP_CURSOR)
    assert stored.mark_delete == third == Position(3, 2)
    assert producer_marks(stored.properties) == {"p": 1, "q": 7}
    stats = dedup.stats()
    assert stats["lastSnapshotPosition"] == "3:2"
    assert stats["entriesSinceSnapshot"] == 0


async def test_at_most_one_snapshot_in_flight() -> None:
    dedup, ledger, _ = make_dedup(broker_deduplication_entries_interval=2)
    await dedup.enable()
    ledger.cursor_table.gate = asyncio.Event()
    publish(dedup, ledger, "p", 0)
    second = publish(dedup, ledger, "p", 1)  # interval reached: snapshot starts, blocks
    await settle()
    assert ledger.cursor_table.writes_in_progress == 1
    for seq in range(2, 5):  # more than the interval while it is stuck
        publish(dedup, ledger, "p", seq)
    await settle()
    assert ledger.cursor_table.writes_in_progress == 1
    last = publish(dedup, ledger, "p", 5)
    ledger.cursor_table.gate.set()
    await settle()
    # The stuck snapshot is stored, then the one due meanwhile follows on its own.
    written = snapshots(ledger)
    assert [(r.mark_delete, r.properties) for r in written] == [
        (second, {"p": 1}),
        (last, {"p": 5}),
    ]
    assert ledger.cursor_table.max_writes_in_progress == 1
    assert dedup.stats()["entriesSinceSnapshot"] == 0
    publish(dedup, ledger, "p", 6)
    await settle()
    assert len(snapshots(ledger)) == 2


async def test_failed_snapshot_is_logged_and_retried_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dedup, ledger, _ = make_dedup(broker_deduplication_entries_interval=2)
    await dedup.enable()
    ledger.cursor_table.failure = StorageError("Kafka did not acknowledge the cursor write")
    with caplog.at_level(logging.WARNING, logger="dedup_broker.pip6"):
        publish(dedup, ledger, "p", 0)
        publish(dedup, ledger, "p", 1)
        await settle()
    assert warnings(caplog) == [
        f"deduplication snapshot of {ledger.name} failed: "
        "Kafka did not acknowledge the cursor write"
    ]
    assert dedup.stats()["lastSnapshotPosition"] == "3:-1"
    assert dedup.stats()["entriesSinceSnapshot"] == 2
    ledger.cursor_table.failure = None
    third = publish(dedup, ledger, "p", 2)
    await settle()
    assert dedup.stats()["lastSnapshotPosition"] == "3:2"
    stored = ledger.stored_cursor(DEDUP_CURSOR)
    assert (stored.mark_delete, stored.properties) == (third, {"p": 2})


async def test_policy_interval_replaces_the_broker_default_at_runtime() -> None:
    dedup, ledger, clock = make_dedup(broker_deduplication_snapshot_interval_seconds=120)
    await dedup.enable()
    publish(dedup, ledger, "p", 0)
    clock.advance(5)
    dedup.maybe_snapshot_on_timer()
    await settle()
    assert snapshots(ledger) == []  # the broker's 120 s have not passed
    dedup.snapshot_interval_seconds = 3  # a namespace or topic policy
    dedup.maybe_snapshot_on_timer()
    await settle()
    assert len(snapshots(ledger)) == 1
    dedup.snapshot_interval_seconds = 0  # time-based snapshots off
    publish(dedup, ledger, "p", 1)
    clock.advance(1000)
    dedup.maybe_snapshot_on_timer()
    await settle()
    assert len(snapshots(ledger)) == 1


async def test_timer_snapshots_after_the_interval_only_when_entries_were_persisted() -> None:
    dedup, ledger, clock = make_dedup(broker_deduplication_snapshot_interval_seconds=10)
    await dedup.enable()
    clock.advance(30)
    dedup.maybe_snapshot_on_timer()  # nothing persisted yet
    await settle()
    assert snapshots(ledger) == []
    position = publish(dedup, ledger, "p", 0)
    dedup.maybe_snapshot_on_timer()  # 30 s since enabling, one entry: snapshot
    await settle()
    assert ledger.stored_cursor(DEDUP_CURSOR).mark_delete == position
    publish(dedup, ledger, "p", 1)
    clock.advance(9)
    dedup.maybe_snapshot_on_timer()
    await settle()
    assert len(snapshots(ledger)) == 1
    clock.advance(1)
    dedup.maybe_snapshot_on_timer()
    await settle()
    assert len(snapshots(ledger)) == 2
    assert producer_marks(ledger.stored_cursor(DEDUP_CURSOR).properties) == {"p": 1}
    clock.advance(60)
    dedup.maybe_snapshot_on_timer()  # nothing new
    await settle()
    assert len(snapshots(ledger)) == 2


async def test_snapshot_keeps_the_most_recently_active_producers() -> None:
    dedup, ledger, clock = make_dedup(broker_deduplication_max_number_of_producers=3)
    await dedup.enable()
    for index in range(5):
        publish(dedup, ledger, f"p{index}", index * 10)
        clock.advance(1)
    assert dedup.check("p1", 10, 10) is Verdict.DUP  # p1 active again: most recent now
    await dedup.take_snapshot()
    assert producer_marks(ledger.stored_cursor(DEDUP_CURSOR).properties) == {
        "p1": 10,
        "p3": 30,
        "p4": 40,
    }
    # Memory still knows every producer; only the stored snapshot is limited.
    assert [dedup.last_sequence_id(f"p{i}") for i in range(5)] == [0, 10, 20, 30, 40]


async def test_snapshot_position_only_moves_forward() -> None:
    dedup, ledger, _ = make_dedup()
    await dedup.enable()
    await dedup.take_snapshot()  # nothing persisted: nothing to store
    assert snapshots(ledger) == []
    position = publish(dedup, ledger, "p", 0)
    await dedup.take_snapshot()
    await dedup.take_snapshot()
    assert len(snapshots(ledger)) == 1
    assert ledger.stored_cursor(DEDUP_CURSOR).mark_delete == position


async def test_inactive_producers_are_forgotten_unless_connected_or_in_flight() -> None:
    dedup, ledger, clock = make_dedup(broker_deduplication_producer_inactivity_timeout_minutes=1)
    await dedup.enable()
    dedup.producer_connected("connected")
    publish(dedup, ledger, "connected", 0)
    publish(dedup, ledger, "idle", 0)
    dedup.producer_connected("gone")
    publish(dedup, ledger, "gone", 0)
    assert dedup.check("busy", 0, 0) is Verdict.NOT_DUP  # never acknowledged
    clock.advance(30)
    dedup.producer_disconnected("gone")  # idle from now on
    clock.advance(31)
    dedup.maybe_snapshot_on_timer()
    assert dedup.last_sequence_id("idle") == -1
    assert dedup.last_sequence_id("gone") == 0
    assert dedup.stats()["producers"] == 3
    clock.advance(30)
    dedup.maybe_snapshot_on_timer()
    assert dedup.last_sequence_id("gone") == -1
    assert dedup.last_sequence_id("connected") == 0
    assert dedup.check("busy", 0, 0) is Verdict.UNKNOWN
    assert dedup.check("idle", 0, 0) is Verdict.NOT_DUP  # forgotten: new again
    assert dedup.stats()["producers"] == 3
    await dedup.take_snapshot()
    assert producer_marks(ledger.stored_cursor(DEDUP_CURSOR).properties) == {"connected": 0}


async def test_stats() -> None:
    dedup, ledger, _ = make_dedup()
    assert dedup.stats() == {
        "status": "Disabled",
        "producers": 0,
        "lastSnapshotPosition": "-1:-1",
        "lastSnapshotTime": 0,
        "entriesSinceSnapshot": 0,
        "snapshotIntervalSeconds": 120,
        "lastRecoveryMillis": 0,
        "snapshotsTaken": 0,
        "snapshotFailures": 0,
    }
    await dedup.enable()
    recovery_ms = dedup.stats()["lastRecoveryMillis"]
    assert isinstance(recovery_ms, int) and recovery_ms >= 0
    publish(dedup, ledger, "a", 0)
    publish(dedup, ledger, "b", 0)
    assert dedup.check("c", 0, 0) is Verdict.NOT_DUP
    created = ledger.stored_cursor(DEDUP_CURSOR)
    assert dedup.stats() == {
        "status": "Enabled",
        "producers": 3,
        "lastSnapshotPosition": "3:-1",
        "lastSnapshotTime": created.last_active_ms,  # the empty cursor stored at enabling
        "entriesSinceSnapshot": 2,
        "snapshotIntervalSeconds": 120,
        "lastRecoveryMillis": recovery_ms,
        "snapshotsTaken": 0,  # taken in the background only
        "snapshotFailures": 0,
    }
    before = int(time.time() * 1000)
    await dedup.take_snapshot()
    after = int(time.time() * 1000)
    stats = dedup.stats()
    snapshot_time = stats.pop("lastSnapshotTime")
    assert isinstance(snapshot_time, int) and before <= snapshot_time <= after
    assert stats == {
        "status": "Enabled",
        "producers": 3,
        "lastSnapshotPosition": "3:1",
        "entriesSinceSnapshot": 0,
        "snapshotIntervalSeconds": 120,
        "lastRecoveryMillis": recovery_ms,
        "snapshotsTaken": 0,  # taken in the background only
        "snapshotFailures": 0,
    }


async def test_close_takes_a_final_snapshot_when_something_changed() -> None:
    dedup, ledger, _ = make_dedup()
    await dedup.enable()
    last = publish(dedup, ledger, "p", 0)
    await dedup.close()
    assert len(snapshots(ledger)) == 1
    assert ledger.stored_cursor(DEDUP_CURSOR).mark_delete == last

    again, ledger2, _ = make_dedup(ledger.reopened())
    stored = snapshots(ledger2)
    await again.enable()
    await again.close()  # nothing persisted since the snapshot: nothing written
    assert snapshots(ledger2) == stored


async def test_close_survives_a_failing_snapshot(caplog: pytest.LogCaptureFixture) -> None:
    dedup, ledger, _ = make_dedup()
    await dedup.enable()
    publish(dedup, ledger, "p", 0)
    ledger.cursor_table.failure = StorageError("Kafka did not acknowledge the cursor write")
    with caplog.at_level(logging.WARNING, logger="dedup_broker.pip6.state"):
        await dedup.close()
    assert warnings(caplog) == [
        f"final deduplication snapshot of {ledger.name} failed: "
        "Kafka did not acknowledge the cursor write"
    ]
    assert snapshots(ledger) == []


async def test_no_snapshot_after_close() -> None:
    dedup, ledger, clock = make_dedup(broker_deduplication_entries_interval=1)
    await dedup.enable()
    await dedup.close()
    publish(dedup, ledger, "p", 0)
    clock.advance(3600)
    dedup.maybe_snapshot_on_timer()
    await settle()
    assert snapshots(ledger) == []
