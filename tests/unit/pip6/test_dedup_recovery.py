"""Recovery from the snapshot plus replay, reading stored metadata, disable/enable."""

from __future__ import annotations

import logging

import pytest
from dedup_fakes import make_dedup, message, new_ledger, snapshots

from dedup_broker.pip6 import state as sequence
from dedup_broker.pip6.chunks import Chunk
from dedup_broker.pip6.state import (
    DEDUP_CURSOR,
    DedupStatus,
    StoredSequence,
    Verdict,
    stored_sequence,
)
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage.values import Position


def batch_without_highest(producer: str, ids: list[int]) -> bytes:
    """A batch as C++-based clients send it: per-message ids, no highest_sequence_id."""
    payload = build_batch([(pb.SingleMessageMetadata(sequence_id=i), b"m") for i in ids])
    metadata = pb.MessageMetadata(
        producer_name=producer,
        sequence_id=ids[0],
        publish_time=1,
        num_messages_in_batch=len(ids),
    )
    return encode_message(metadata, payload)


def test_stored_sequence_of_each_kind_of_entry() -> None:
    assert stored_sequence(message("p", 4)) == StoredSequence("p", 4, 4)
    with_highest = message("p", 10, num_messages_in_batch=5, highest_sequence_id=14)
    assert stored_sequence(with_highest) == StoredSequence("p", 10, 14)
    assert stored_sequence(batch_without_highest("q", [20, 21, 25])) == StoredSequence(
        "q", 20, 25, (20, 21, 25)
    )
    assert stored_sequence(batch_without_highest("q", [20, 21, 22])) == StoredSequence("q", 20, 22)
    assert stored_sequence(message("p", 2**64 - 2)) == StoredSequence("p", -2, -2)
    assert stored_sequence(message("p", 9, marker_type=1)) is None
    first_chunk = message("p", 3, uuid="p-3", num_chunks_from_msg=2, chunk_id=0)
    last_chunk = message("p", 3, uuid="p-3", num_chunks_from_msg=2, chunk_id=1)
    assert stored_sequence(first_chunk) is None
    assert stored_sequence(last_chunk) == StoredSequence("p", 3, 3)


async def test_recovery_loads_the_snapshot_and_replays_only_what_follows() -> None:
    dedup, ledger, _ = make_dedup()
    await dedup.enable()
    for seq in range(3):
        assert dedup.check("p", seq, seq) is Verdict.NOT_DUP
        dedup.on_persisted("p", seq, ledger.add_entry(message("p", seq)))
    assert dedup.check("q", 0, 4) is Verdict.NOT_DUP
    snapshot = ledger.add_entry(message("q", 0, num_messages_in_batch=5, highest_sequence_id=4))
    dedup.on_persisted("q", 4, snapshot, lowest=0)
    await dedup.take_snapshot()
    # After the snapshot: more entries, one ledger rollover, and a crash (no close).
    dedup.on_persisted("p", 3, ledger.add_entry(message("p", 3)))
    ledger.roll()
    for seq in (5, 9):
        dedup.on_persisted("p", seq, ledger.add_entry(message("p", seq)))
    dedup.on_persisted("r", 0, ledger.add_entry(message("r", 0)))

    reopened = ledger.reopened()
    recovered, _, _ = make_dedup(reopened)
    await recovered.enable()

    assert recovered.status is DedupStatus.ENABLED
    assert reopened.reads[0][0] == Position(3, 4)  # right after the snapshot position
    assert [recovered.last_sequence_id(n) for n in ("p", "q", "r", "s")] == [9, 4, 0, -1]
    assert recovered.stats()["entriesSinceSnapshot"] == 4
    assert recovered.stats()["lastSnapshotPosition"] == "3:3"
    verdicts = [
        recovered.check("p", 9, 9),
        recovered.check("p", 4, 4),
        recovered.check("q", 0, 4),
        recovered.check("q", 3, 6),
        recovered.check("p", 10, 10),
        recovered.check("q", 5, 5),
        recovered.check("s", 0, 0),
    ]
    assert verdicts == [
        Verdict.DUP,
        Verdict.PARTLY_DUP,  # 4 was left out between 3 and 5: a hole, new
        Verdict.DUP,
        Verdict.PARTLY_DUP,  # 3 and 4 stored, 5 and 6 new
        Verdict.NOT_DUP,
        Verdict.NOT_DUP,
        Verdict.NOT_DUP,
    ]


async def test_replay_reads_in_chunks_across_ledgers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sequence, "REPLAY_BATCH_ENTRIES", 2)
    ledger = new_ledger()
    for seq in range(2):
        ledger.add_entry(message("p", seq))
    ledger.roll()
    ledger.roll()  # an empty ledger in between, skipped
    for seq in range(2, 5):
        ledger.add_entry(message("p", seq))
    dedup, _, _ = make_dedup(ledger)
    await dedup.enable()
    assert ledger.reads == [
        (Position(3, 0), 2),
        (Position(5, 0), 2),
        (Position(5, 2), 2),
        (Position(5, 3), 2),
    ]
    assert dedup.last_sequence_id("p") == 4
    assert dedup.stats()["entriesSinceSnapshot"] == 5


async def test_replay_counts_batches_chunks_and_skips_what_does_not_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger = new_ledger()
    ledger.add_entry(batch_without_highest("cpp", [0, 1, 2]))
    ledger.add_entry(message("java", 0, num_messages_in_batch=10, highest_sequence_id=9))
    ledger.add_entry(message("chunked", 0, uuid="c-0", num_chunks_from_msg=2, chunk_id=0))
    ledger.add_entry(message("chunked", 0, uuid="c-0", num_chunks_from_msg=2, chunk_id=1))
    in_progress = ledger.add_entry(
        message("chunked", 1, uuid="c-1", num_chunks_from_msg=2, chunk_id=0)
    )
    ledger.add_entry(message("marker", 5, marker_type=2))
    garbage = ledger.add_entry(b"\x00\x00\x00\x09not-proto")
    dedup, _, _ = make_dedup(ledger)
    with caplog.at_level(logging.WARNING, logger="dedup_broker.pip6.state"):
        await dedup.enable()
    assert [dedup.last_sequence_id(n) for n in ("cpp", "java", "chunked", "marker")] == [
        2,
        9,
        0,
        -1,
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"entry {garbage} of {ledger.name} has no readable metadata, ignored for deduplication"
    )
    # The incomplete chunked message 1: its stored chunk 0 is known (a resend of it is
    # answered with where it is), its last chunk is accepted ...
    chunk = Chunk("chunked", 1, "c-1", 0, 2)
    assert dedup.check_chunk(chunk) == (Verdict.DUP, in_progress)
    assert dedup.check("chunked", 1, 1) is Verdict.NOT_DUP
    # ... and until it is stored, snapshots stay before chunk 0, so that a recovery
    # replays it (the entries after it are replayed again, readable or not).
    await dedup.take_snapshot()
    assert ledger.stored_cursor(DEDUP_CURSOR).mark_delete == ledger.previous_position(in_progress)
    dedup.on_persisted("chunked", 1, ledger.add_entry(b"the last chunk"))
    await dedup.take_snapshot()
    assert ledger.stored_cursor(DEDUP_CURSOR).mark_delete > garbage


async def test_enough_replayed_entries_start_a_snapshot_right_away() -> None:
    ledger = new_ledger()
    for seq in range(4):
        ledger.add_entry(message("p", seq))
    dedup, _, _ = make_dedup(ledger, broker_deduplication_entries_interval=4)
    await dedup.enable()
    await dedup.close()  # waits for the background snapshot
    stored = ledger.stored_cursor(DEDUP_CURSOR)
    assert (stored.mark_delete, stored.properties) == (Position(3, 3), {"p": 3})
    assert len(snapshots(ledger)) == 1


async def test_disable_deletes_the_cursor_and_forgets() -> None:
    dedup, ledger, _ = make_dedup()
    await dedup.enable()
    assert ledger.cursors.exists(DEDUP_CURSOR)
    assert dedup.check("p", 0, 0) is Verdict.NOT_DUP
    dedup.on_persisted("p", 0, ledger.add_entry(message("p", 0)))
    await dedup.take_snapshot()
    await dedup.disable()
    assert dedup.status is DedupStatus.DISABLED
    assert not ledger.cursors.exists(DEDUP_CURSOR)
    assert dedup.last_sequence_id("p") == -1
    assert dedup.check("p", 0, 0) is Verdict.NOT_DUP
    assert dedup.stats()["producers"] == 0
    await dedup.disable()  # already disabled: nothing to do
    # Enabling again creates the cursor at the earliest entry and relearns from the log.
    await dedup.enable()
    assert ledger.stored_cursor(DEDUP_CURSOR).mark_delete == Position(3, -1)
    assert dedup.last_sequence_id("p") == 0
    assert dedup.check("p", 0, 0) is Verdict.DUP
