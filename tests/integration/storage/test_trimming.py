"""Trimming on the real Kafka with the direct deleter: consumed ledgers go, others stay."""

from __future__ import annotations

import asyncio

from confluent_kafka.admin import AdminClient

from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.storage.values import LedgerStatus, LedgerType, Position, Retention
from tests.integration.storage.helpers import ConfigFactory, run


def _existing(admin: AdminClient, topics: list[str]) -> set[str]:
    present = set(admin.list_topics(timeout=10).topics)
    return {t for t in topics if t in present}


def test_consumed_ledgers_are_trimmed_and_needed_ones_kept(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    config = make_config(
        managed_ledger_max_entries_per_ledger=3, managed_ledger_min_ledger_rollover_time_minutes=0
    )
    topics: dict[int, str] = {}

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("trim")
            slow = await ml.cursors.open("slow", "earliest")
            fast = await ml.cursors.open("fast", "earliest")
            positions = await asyncio.gather(*(ml.append(b"e%d" % i, 0) for i in range(10)))
            ids = [info.ledger_id for info in ml.ledgers()]
            topics.update({i: storage.ledger_store.topic(i) for i in ids})
            assert len(ids) == 4  # 3 + 3 + 3 + the current one
            fast.mark_delete(positions[-1])
            # "slow" still needs everything: nothing goes.
            assert await ml.trimmer.trim(Retention(0, 0)) == []
            slow.mark_delete(positions[4])  # inside the second ledger
            assert await ml.trimmer.trim(Retention(0, 0)) == [ids[0]]
            # Infinite retention keeps consumed ledgers.
            slow.mark_delete(positions[-1])
            assert await ml.trimmer.trim(Retention(-1, -1)) == []
            assert await ml.trimmer.trim(Retention(0, 0)) == ids[1:3]
            assert [info.ledger_id for info in ml.ledgers()] == ids[3:]
            # The unconsumed last entry is still readable.
            entries = await ml.read_entries(Position(ids[3], 0), 10)
            assert [e.data for e in entries] == [b"e9"]
            assert ml.trimmer.status(ids[0], LedgerType.LEDGER, "") is LedgerStatus.DELETABLE
            assert ml.trimmer.status(ids[3], LedgerType.LEDGER, "") is LedgerStatus.IN_USE
        finally:
            await storage.close()
        # A restarted instance sees the trimmed list.
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("trim")
            assert ml.ledgers()[0].ledger_id == ids[3]
            entries = await ml.read_entries(ml.first_position(), 10)
            assert [e.data for e in entries] == [b"e9"]
        finally:
            await storage.close()

    run(scenario)
    ids = sorted(topics)
    assert _existing(admin, [topics[i] for i in ids[:3]]) == set()
    assert _existing(admin, [topics[ids[3]]]) == {topics[ids[3]]}


def test_a_ledger_never_listed_is_deleted_when_the_managed_ledger_reopens(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    config = make_config()
    orphan_topic: list[str] = []

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("crashy")
            await ml.append(b"x", 0)
            # As if a rollover crashed after creating its ledger, before recording it.
            orphan = await storage.ledger_store.create("crashy")
            orphan_topic.append(storage.ledger_store.topic(orphan))
        finally:
            await storage.close()
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("crashy")
            assert orphan not in [info.ledger_id for info in ml.ledgers()]
            entries = await ml.read_entries(ml.first_position(), 10)
            assert [e.data for e in entries] == [b"x"]
        finally:
            await storage.close()

    run(scenario)
    assert _existing(admin, orphan_topic) == set()
