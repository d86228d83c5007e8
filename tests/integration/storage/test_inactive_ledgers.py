"""``managedLedgerInactiveLedgerRolloverTimeSeconds`` on the real Kafka: an idle ledger is
closed, nothing replaces it until the next append, and once consumed it is trimmed, so an
idle, consumed topic holds no Kafka topic at all; reads, cursors and reloads see every
entry exactly once, in order."""

from __future__ import annotations

import asyncio

from confluent_kafka.admin import AdminClient

from dedup_broker.storage.api import Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.storage.values import Retention
from tests.integration.storage.helpers import ConfigFactory, run, wait_until


def _exists(admin: AdminClient, topic: str) -> bool:
    return topic in admin.list_topics(timeout=10).topics


def test_an_idle_ledger_closes_and_once_consumed_leaves_kafka(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    config = make_config(managed_ledger_inactive_ledger_rollover_time_seconds=1)
    topics: dict[str, str] = {}

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("idle")
            # Loaded, never written: no ledger, no Kafka topic.
            assert ml.ledgers() == []
            sub = await ml.cursors.open("sub", "earliest")
            first = [await ml.append(b"a%d" % i, 0) for i in range(3)]
            ledger = first[0].ledger_id
            topics["first"] = storage.ledger_store.topic(ledger)
            assert [(i.ledger_id, i.entries) for i in ml.ledgers()] == [(ledger, -1)]
            # Nothing appended for a second: the ledger is closed, none replaces it.
            await wait_until(lambda: not ml.ledgers()[-1].is_open, timeout=15)
            assert [(i.ledger_id, i.entries) for i in ml.ledgers()] == [(ledger, 3)]
            assert ml.last_confirmed == first[-1]
            entries = await sub.read_entries(10)
            assert [e.data for e in entries] == [b"a0", b"a1", b"a2"]
            # Unconsumed it stays; consumed, it goes, and the list is empty.
            assert await ml.trimmer.trim(Retention(0, 0)) == []
            sub.mark_delete(first[-1])
            assert await ml.trimmer.trim(Retention(0, 0)) == [ledger]
            assert ml.ledgers() == []
            assert ml.last_confirmed == Position(-1, -1)  # as a reload would find it
            assert not sub.has_more_entries()
            # The next append creates the next ledger; the cursor reads on from there.
            more = [await ml.append(b"b%d" % i, 0) for i in range(2)]
            assert more[0].ledger_id > ledger
            assert [p.entry_id for p in more] == [0, 1]
            entries = await sub.read_entries(10)
            assert [e.data for e in entries] == [b"b0", b"b1"]
            assert sub.backlog() == 2
        finally:
            await storage.close()
        # Reloaded: the unacknowledged entries come again, exactly once, in order.
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("idle")
            assert [i.ledger_id for i in ml.ledgers()] == [more[0].ledger_id]
            sub = await ml.cursors.open("sub", "earliest")
            entries = await sub.read_entries(10)
            assert [e.data for e in entries] == [b"b0", b"b1"]
            sub.mark_delete(more[-1])
            await wait_until(lambda: not ml.ledgers()[-1].is_open, timeout=15)
            assert await ml.trimmer.trim(Retention(0, 0)) == [more[0].ledger_id]
            topics["second"] = storage.ledger_store.topic(more[0].ledger_id)
            await sub.flush()
        finally:
            await storage.close()
        # Reloaded with every ledger trimmed: still none, and positions go on after them.
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("idle")
            assert ml.ledgers() == []
            sub = await ml.cursors.open("sub", "earliest")
            assert sub.backlog() == 0 and not sub.has_more_entries()
            last = await ml.append(b"c", 0)
            assert last.ledger_id > more[0].ledger_id
            assert [e.data for e in await sub.read_entries(10)] == [b"c"]
        finally:
            await storage.close()

    run(scenario, timeout=120)
    assert not _exists(admin, topics["first"])
    assert not _exists(admin, topics["second"])


def test_a_ledger_created_lazily_but_never_listed_is_deleted_after_a_trimmed_list(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    """A crash between creating the next ledger and listing it, when trimming had
    emptied the list: the list remembers its last ledger, so the orphan is found."""
    config = make_config(managed_ledger_inactive_ledger_rollover_time_seconds=1)
    orphan_topic: list[str] = []

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("crashy")
            position = await ml.append(b"x", 0)
            await wait_until(lambda: not ml.ledgers()[-1].is_open, timeout=15)
            assert await ml.trimmer.trim(Retention(0, 0)) == [position.ledger_id]
            assert ml.ledgers() == []
            orphan = await storage.ledger_store.create("crashy")
            orphan_topic.append(storage.ledger_store.topic(orphan))
        finally:
            await storage.close()
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("crashy")
            assert ml.ledgers() == []
            assert (await ml.append(b"y", 0)).ledger_id > orphan
            entries = await ml.read_entries(ml.first_position(), 10)
            assert [e.data for e in entries] == [b"y"]
        finally:
            await storage.close()

    run(scenario, timeout=120)
    assert orphan_topic and not _exists(admin, orphan_topic[0])


def test_appends_racing_the_close_of_an_idle_ledger_are_all_stored_in_order(
    make_config: ConfigFactory,
) -> None:
    """Bursts of appends timed around the moment an idle ledger closes (before it, while
    the close is stored, after it): those caught by the close queue behind it and go to
    the next ledger; none is lost or stored twice, call order is kept."""
    config = make_config(managed_ledger_inactive_ledger_rollover_time_seconds=1)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("racy")
            sent = 0
            for pause in (0.9, 0.97, 1.0, 1.01, 1.03, 1.06, 1.1, 1.5):
                await ml.append(b"m%d" % sent, 0)
                sent += 1
                await asyncio.sleep(pause)
                futures = [ml.append(b"m%d" % (sent + i), 0) for i in range(20)]
                sent += 20
                positions = [await f for f in futures]
                assert positions == sorted(positions)
            assert len(ml.ledgers()) >= 2  # closes happened between the bursts
            cursor = ml.cursors.new_non_durable(Position(-1, -1))
            data = [e.data for e in await cursor.read_entries(1000)]
            assert data == [b"m%d" % i for i in range(sent)]
        finally:
            await storage.close()

    run(scenario, timeout=120)
