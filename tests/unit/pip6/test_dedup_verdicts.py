"""Verdicts of the PIP-6 state machine: in-flight writes, holes, batches, write failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dedup_fakes import make_dedup, message

from dedup_broker.errors import StorageError
from dedup_broker.pip6 import holes
from dedup_broker.pip6.state import DedupStatus, MessageDeduplication, Verdict
from dedup_broker.storage.values import Entry, Position

NOT_DUP, DUP, UNKNOWN = Verdict.NOT_DUP, Verdict.DUP, Verdict.UNKNOWN
PARTLY_DUP = Verdict.PARTLY_DUP


async def enabled(**settings: Any) -> MessageDeduplication:
    dedup, _, _ = make_dedup(**settings)
    await dedup.enable()
    assert dedup.status is DedupStatus.ENABLED
    return dedup


def at(entry_id: int) -> Position:
    return Position(3, entry_id)


async def test_new_then_in_flight_then_duplicate() -> None:
    dedup = await enabled()
    assert dedup.last_sequence_id("p") == -1
    assert dedup.check("p", 0, 0) is NOT_DUP
    # The same id again while the first write is not acknowledged: outcome unknown.
    assert dedup.check("p", 0, 0) is UNKNOWN
    assert dedup.last_sequence_id("p") == -1
    dedup.on_persisted("p", 0, at(0))
    assert dedup.check("p", 0, 0) is DUP
    assert dedup.last_sequence_id("p") == 0
    assert dedup.check("p", 1, 1) is NOT_DUP


async def test_several_in_flight_only_the_acknowledged_are_duplicates() -> None:
    dedup = await enabled()
    assert [dedup.check("p", s, s) for s in (0, 1, 2)] == [NOT_DUP] * 3
    dedup.on_persisted("p", 0, at(0))
    assert [dedup.check("p", s, s) for s in (0, 1, 2, 3)] == [DUP, UNKNOWN, UNKNOWN, NOT_DUP]
    dedup.on_persisted("p", 1, at(1))
    dedup.on_persisted("p", 2, at(2))
    assert [dedup.check("p", s, s) for s in (1, 2, 3, 4)] == [DUP, DUP, UNKNOWN, NOT_DUP]
    assert dedup.last_sequence_id("p") == 2


async def test_ids_never_stored_below_the_mark_are_new_while_remembered() -> None:
    dedup, _, clock = make_dedup()
    await dedup.enable()
    assert dedup.check("p", 5, 5) is NOT_DUP
    dedup.on_persisted("p", 5, at(0))
    assert dedup.check("p", 10, 10) is NOT_DUP  # a gap is fine
    dedup.on_persisted("p", 10, at(1))
    # Ids left out below the mark were never stored: new (a late key-based batch).
    assert [dedup.check("p", s, s) for s in (5, 10)] == [DUP, DUP]
    assert dedup.check("p", 7, 7) is PARTLY_DUP
    assert dedup.marks.keep_of("p", [7]) == [True]
    dedup.marks.admit_part("p", 7)
    dedup.on_persisted("p", 7, at(2))
    assert dedup.check("p", 7, 7) is DUP
    assert dedup.marks.holes_of("p") == [(0, 4), (6, 6), (8, 9)]
    # Forgotten after a while: then the mark alone answers, as Pulsar's does.
    clock.advance(holes.HOLE_MEMORY_SECONDS + 1)
    dedup.marks.forget_old_holes()
    assert [dedup.check("p", s, s) for s in (0, 6, 9)] == [DUP] * 3
    assert dedup.check("p", 11, 11) is NOT_DUP
    assert dedup.last_sequence_id("p") == 10


async def test_batches_check_the_lowest_and_record_the_highest() -> None:
    dedup = await enabled()
    assert dedup.check("p", 0, 9) is NOT_DUP
    assert dedup.check("p", 5, 12) is UNKNOWN  # overlaps the batch in flight
    dedup.on_persisted("p", 9, at(0), lowest=0)
    assert dedup.last_sequence_id("p") == 9
    assert dedup.check("p", 0, 9) is DUP
    assert dedup.check("p", 3, 3) is DUP
    # Partly stored, partly new, nothing in flight: the caller writes only the new ones.
    assert dedup.check("p", 5, 12) is PARTLY_DUP
    assert dedup.check("p", 10, 19) is NOT_DUP
    assert dedup.check("p", 20, 20) is NOT_DUP
    assert dedup.check("p", 15, 15) is UNKNOWN


async def test_highest_below_lowest_is_taken_as_lowest() -> None:
    dedup = await enabled()
    assert dedup.check("p", 7, 0) is NOT_DUP
    assert dedup.check("p", 7, 7) is UNKNOWN
    assert dedup.check("p", 8, 8) is NOT_DUP


async def test_producers_are_independent() -> None:
    dedup = await enabled()
    assert dedup.check("a", 0, 0) is NOT_DUP
    assert dedup.check("b", 0, 0) is NOT_DUP
    dedup.on_persisted("a", 0, at(0))
    assert dedup.check("a", 0, 0) is DUP
    assert dedup.check("b", 0, 0) is UNKNOWN
    assert dedup.check("c", 0, 0) is NOT_DUP
    assert (dedup.last_sequence_id("a"), dedup.last_sequence_id("b")) == (0, -1)


async def test_write_acknowledged_without_check_still_guards_resends() -> None:
    # A write admitted before deduplication was enabled is acknowledged afterwards.
    dedup = await enabled()
    dedup.on_persisted("p", 7, at(0))
    assert dedup.check("p", 7, 7) is DUP
    assert dedup.check("p", 8, 8) is NOT_DUP


async def test_sequence_ids_compare_as_signed_longs() -> None:
    dedup = await enabled()
    assert dedup.check("p", 2**64 - 1, 2**64 - 1) is NOT_DUP  # -1 as Java sees it
    assert dedup.check("p", 0, 0) is NOT_DUP
    dedup.on_persisted("p", 0, at(0))
    assert dedup.last_sequence_id("p") == 0


async def test_write_failure_resets_pushed_after_resolution() -> None:
    dedup = await enabled()
    for seq in range(3):
        assert dedup.check("p", seq, seq) is NOT_DUP
    assert dedup.check("q", 5, 5) is NOT_DUP
    dedup.on_persisted("p", 0, at(0))
    dedup.on_persisted("q", 5, at(1))
    # The write of p:1 fails; p:2 behind it fails too. Record p:1 landed anyway.
    dedup.on_write_failed()
    dedup.on_write_failed()
    assert dedup.check("p", 1, 1) is UNKNOWN
    assert dedup.check("p", 3, 3) is UNKNOWN
    assert dedup.check("p", 0, 0) is DUP
    # q had nothing in flight: duplicates are still recognised, nothing new admitted.
    assert dedup.check("q", 5, 5) is DUP
    assert dedup.check("q", 6, 6) is UNKNOWN
    assert dedup.check("new", 0, 0) is UNKNOWN

    landed = [Entry(at(2), message("p", 1), 0)]
    await dedup.resolve_after_failure(landed)

    assert dedup.last_sequence_id("p") == 1
    assert dedup.check("p", 1, 1) is DUP
    assert dedup.check("p", 2, 2) is NOT_DUP
    assert dedup.check("q", 6, 6) is NOT_DUP
    assert dedup.check("new", 0, 0) is NOT_DUP
    assert dedup.stats()["entriesSinceSnapshot"] == 3


async def test_write_failure_with_nothing_landed_lets_the_client_resend() -> None:
    dedup = await enabled()
    assert dedup.check("p", 0, 0) is NOT_DUP
    assert dedup.check("p", 1, 1) is NOT_DUP
    dedup.on_write_failed()
    dedup.on_persisted("p", 0, at(0))  # acknowledged before the failed one
    assert dedup.check("p", 1, 1) is UNKNOWN
    await dedup.resolve_after_failure([])
    assert dedup.last_sequence_id("p") == 0
    assert dedup.check("p", 0, 0) is DUP
    assert dedup.check("p", 1, 1) is NOT_DUP


async def test_resolution_reads_batch_ranges_and_ignores_already_counted_entries() -> None:
    dedup = await enabled()
    assert dedup.check("p", 0, 0) is NOT_DUP
    assert dedup.check("p", 1, 4) is NOT_DUP
    dedup.on_persisted("p", 0, at(0))
    dedup.on_write_failed()
    batch = message("p", 1, num_messages_in_batch=4, highest_sequence_id=4)
    await dedup.resolve_after_failure([Entry(at(0), message("p", 0), 0), Entry(at(1), batch, 0)])
    assert dedup.last_sequence_id("p") == 4
    assert dedup.check("p", 1, 4) is DUP
    assert dedup.check("p", 5, 5) is NOT_DUP


async def test_disabled_admits_everything_and_knows_nothing() -> None:
    dedup, _, _ = make_dedup()
    assert dedup.status is DedupStatus.DISABLED
    assert [dedup.check("p", 0, 0) for _ in range(2)] == [NOT_DUP, NOT_DUP]
    dedup.on_persisted("p", 0, at(0))
    assert dedup.last_sequence_id("p") == -1
    dedup.on_write_failed()
    assert dedup.check("p", 0, 0) is NOT_DUP


async def test_recovering_admits_nothing() -> None:
    dedup, ledger, _ = make_dedup()
    ledger.add_entry(message("p", 0))
    ledger.read_gate = asyncio.Event()
    enabling = asyncio.create_task(dedup.enable())
    for _ in range(10):
        await asyncio.sleep(0)
    assert dedup.status is DedupStatus.RECOVERING
    assert dedup.check("p", 1, 1) is UNKNOWN
    # A write admitted before enabling is acknowledged while the replay runs.
    dedup.on_persisted("q", 4, Position(3, 1))
    # ... and one whose delivery failed turns out to have landed.
    await dedup.resolve_after_failure([Entry(Position(3, 2), message("r", 8), 0)])
    ledger.read_gate.set()
    await enabling
    assert dedup.stats()["status"] == "Enabled"
    assert dedup.check("p", 0, 0) is DUP
    assert dedup.check("p", 1, 1) is NOT_DUP
    assert dedup.check("q", 4, 4) is DUP
    assert dedup.last_sequence_id("q") == 4
    assert dedup.last_sequence_id("r") == 8
    assert dedup.check("r", 8, 8) is DUP


async def test_failed_recovery_admits_nothing_until_enabled_again() -> None:
    dedup, ledger, _ = make_dedup()
    ledger.cursor_table.failure = StorageError("cursor topic unavailable")
    with pytest.raises(StorageError, match=r"^cursor topic unavailable$"):
        await dedup.enable()
    assert dedup.status is DedupStatus.FAILED
    assert dedup.check("p", 0, 0) is UNKNOWN
    ledger.cursor_table.failure = None
    await dedup.enable()
    assert dedup.stats()["status"] == "Enabled"
    assert dedup.check("p", 0, 0) is NOT_DUP
