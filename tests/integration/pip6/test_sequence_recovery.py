"""Deduplication state survives a restart: snapshot on the dedup cursor + replay, on Kafka."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.pip6.marks import producer_marks
from dedup_broker.pip6.state import DEDUP_CURSOR, MessageDeduplication, Verdict
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_sequence_range
from dedup_broker.protocol.framing import encode_message, parse_message
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.storage.values import Position

pytestmark = pytest.mark.timeout(180)

NOT_DUP, DUP, PARTLY_DUP = Verdict.NOT_DUP, Verdict.DUP, Verdict.PARTLY_DUP


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 150))


def make_config(kafka_bootstrap: str, **settings: Any) -> BrokerConfig:
    return BrokerConfig().with_overrides(
        cluster_name=f"dedup-{uuid.uuid4().hex[:10]}",
        kafka_bootstrap_servers=kafka_bootstrap,
        kafka_replication_factor=1,
        **settings,
    )


def block(producer: str, sequence_id: int, highest: int | None = None) -> bytes:
    """A message block as a producer sends it; a batch when ``highest`` is given."""
    metadata = pb.MessageMetadata(
        producer_name=producer, sequence_id=sequence_id, publish_time=1_700_000_000_000
    )
    if highest is not None:
        metadata.num_messages_in_batch = highest - sequence_id + 1
        metadata.highest_sequence_id = highest
    return encode_message(metadata, f"{producer}-{sequence_id}".encode())


async def publish(dedup: MessageDeduplication, ledger: ManagedLedgerImpl, data: bytes) -> Position:
    """The publish path as the topic runs it: check, append, record the acknowledgement."""
    parsed = parse_message(data)
    lowest, highest = batch_sequence_range(parsed.metadata, parsed.payload)
    name = parsed.metadata.producer_name
    assert dedup.check(name, lowest, highest) is NOT_DUP
    position = await ledger.append(data, parsed.metadata.publish_time)
    dedup.on_persisted(name, highest, position, lowest)
    return position


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def parse_position(text: object) -> Position:
    ledger_id, entry_id = (int(part) for part in str(text).split(":"))
    return Position(ledger_id, entry_id)


def marks_up_to(log: list[tuple[Position, str, int]], position: Position) -> dict[str, int]:
    """What a snapshot at ``position`` must hold: each producer's highest id up to it."""
    marks: dict[str, int] = {}
    for entry_position, producer, highest in log:
        if entry_position <= position:
            marks[producer] = max(marks.get(producer, -1), highest)
    return marks


def test_state_after_restart_is_exact(kafka_bootstrap: str) -> None:
    interval = 5
    config = make_config(
        kafka_bootstrap,
        broker_deduplication_entries_interval=interval,
        managed_ledger_max_entries_per_ledger=4,
        managed_ledger_min_ledger_rollover_time_minutes=0,
    )
    name = f"public/default/persistent/dedup-{uuid.uuid4().hex[:8]}"
    log: list[tuple[Position, str, int]] = []

    async def send(dedup: MessageDeduplication, ledger: ManagedLedgerImpl, data: bytes) -> None:
        position = await publish(dedup, ledger, data)
        parsed = parse_message(data)
        log.append(
            (
                position,
                parsed.metadata.producer_name,
                batch_sequence_range(parsed.metadata, parsed.payload)[1],
            )
        )

    async def first_life() -> Position:
        storage = await KafkaStorage.start(config)
        try:
            ledger = await storage.open_managed_ledger(name)
            dedup = MessageDeduplication(config, ledger)
            await dedup.enable()
            await send(dedup, ledger, block("alpha", 0))
            await send(dedup, ledger, block("alpha", 1))
            await send(dedup, ledger, block("beta", 0, 9))
            await dedup.take_snapshot()
            first = parse_position(dedup.stats()["lastSnapshotPosition"])
            assert first == log[-1][0]
            assert producer_marks(ledger.cursors.opened()[DEDUP_CURSOR].properties) == {
                "alpha": 1,
                "beta": 9,
            }

            # More than twice the interval: snapshots start in the background.
            for seq in range(2, 8):
                await send(dedup, ledger, block("alpha", seq))
            await send(dedup, ledger, block("beta", 10, 14))
            for seq in range(5):
                await send(dedup, ledger, block("gamma", seq * 10))
            await eventually(
                lambda: int(str(dedup.stats()["entriesSinceSnapshot"])) < interval,
                "background snapshots",
            )
            background = parse_position(dedup.stats()["lastSnapshotPosition"])
            assert background > first
            assert producer_marks(ledger.cursors.opened()[DEDUP_CURSOR].properties) == marks_up_to(
                log, background
            )
            assert dedup.stats()["entriesSinceSnapshot"] == sum(
                1 for p, _, _ in log if p > background
            )

            await dedup.take_snapshot()
            snapshot = parse_position(dedup.stats()["lastSnapshotPosition"])
            assert snapshot == log[-1][0]
            assert producer_marks(ledger.cursors.opened()[DEDUP_CURSOR].properties) == {
                "alpha": 7,
                "beta": 14,
                "gamma": 40,
            }
            # Two entries after the last snapshot, then a stop without dedup.close():
            # like a crash, they must come back through the replay.
            await send(dedup, ledger, block("alpha", 8))
            await send(dedup, ledger, block("gamma", 50))
            assert len(ledger.ledgers()) >= 5  # entries spread over several ledgers
            return snapshot
        finally:
            await storage.close()

    async def second_life() -> tuple[dict[str, int], dict[str, object], list[Verdict]]:
        storage = await KafkaStorage.start(config)
        try:
            ledger = await storage.open_managed_ledger(name, create=False)
            dedup = MessageDeduplication(config, ledger)
            await dedup.enable()
            state = {n: dedup.last_sequence_id(n) for n in ("alpha", "beta", "gamma", "delta")}
            stats = dedup.stats()
            verdicts = [
                dedup.check("alpha", 8, 8),
                dedup.check("alpha", 3, 3),
                dedup.check("beta", 10, 14),
                dedup.check("beta", 12, 16),
                dedup.check("gamma", 50, 50),
                dedup.check("gamma", 51, 51),
                dedup.check("alpha", 9, 9),
                dedup.check("beta", 15, 19),
                dedup.check("delta", 0, 0),
            ]
            await dedup.close()
            await storage.delete_managed_ledger(name)
            return state, stats, verdicts
        finally:
            await storage.close()

    snapshot = run(first_life())
    state, stats, verdicts = run(second_life())
    assert state == {"alpha": 8, "beta": 14, "gamma": 50, "delta": -1}
    assert stats["status"] == "Enabled"
    assert stats["lastSnapshotPosition"] == str(snapshot)
    assert stats["entriesSinceSnapshot"] == 2
    assert stats["producers"] == 3
    # beta 12..16: 12..14 stored, 15 and 16 new.
    assert verdicts == [DUP, DUP, DUP, PARTLY_DUP, DUP, NOT_DUP, NOT_DUP, NOT_DUP, NOT_DUP]


def test_close_snapshots_so_nothing_is_replayed(kafka_bootstrap: str) -> None:
    config = make_config(kafka_bootstrap)
    name = f"public/default/persistent/dedup-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ledger = await storage.open_managed_ledger(name)
            dedup = MessageDeduplication(config, ledger)
            await dedup.enable()
            for seq in range(3):
                last = await publish(dedup, ledger, block("p", seq))
            await dedup.close()
        finally:
            await storage.close()

        storage = await KafkaStorage.start(config)
        try:
            ledger = await storage.open_managed_ledger(name, create=False)
            assert ledger.cursors.opened() == {}
            dedup = MessageDeduplication(config, ledger)
            await dedup.enable()
            assert dedup.stats()["lastSnapshotPosition"] == str(last)
            assert dedup.stats()["entriesSinceSnapshot"] == 0
            assert dedup.last_sequence_id("p") == 2
            assert dedup.check("p", 2, 2) is DUP
            assert dedup.check("p", 3, 3) is NOT_DUP
            # Disabling removes the cursor from storage, so it holds back nothing.
            await dedup.disable()
            assert not ledger.cursors.exists(DEDUP_CURSOR)
            await storage.delete_managed_ledger(name)
        finally:
            await storage.close()

    run(scenario())
