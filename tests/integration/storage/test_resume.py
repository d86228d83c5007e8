"""Reopening a managed ledger its previous holder closed cleanly: appends go on in the
last ledger instead of a new Kafka topic per load; anything else gets a fresh ledger."""

from __future__ import annotations

from dedup_broker.storage.api import Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, land_records, run


def test_a_clean_close_then_reopen_goes_on_in_the_same_ledger(
    make_config: ConfigFactory,
) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("clean")
            first = [await ml.append(b"a%d" % i, 0) for i in range(3)]
            ledger = first[0].ledger_id
            await ml.close()
            reopened = await storage.open_managed_ledger("clean")
            assert reopened is not ml
            assert [(i.ledger_id, i.entries) for i in reopened.ledgers()] == [(ledger, -1)]
            assert reopened.last_confirmed == first[-1]
            more = [await reopened.append(b"b%d" % i, 0) for i in range(2)]
            assert more == [Position(ledger, 3), Position(ledger, 4)]
            entries = await reopened.read_entries(Position(ledger, 0), 10)
            assert [e.data for e in entries] == [b"a0", b"a1", b"a2", b"b0", b"b1"]
            # An idle load and close (nothing written) changes nothing either.
            await reopened.close()
            idle = await storage.open_managed_ledger("clean")
            await idle.close()
            third = await storage.open_managed_ledger("clean")
            assert [i.ledger_id for i in third.ledgers()] == [ledger]
            assert await third.append(b"c", 0) == Position(ledger, 5)
            # A crash of the holder of a resumed ledger: the next one finds all of it.
            successor = await KafkaStorage.start(config)
            try:
                taken = await successor.open_managed_ledger("clean")
                infos = taken.ledgers()
                assert [(i.ledger_id, i.entries) for i in infos[:-1]] == [(ledger, 6)]
                assert infos[0].size == len(b"a0a1a2b0b1c")
                assert infos[-1].ledger_id > ledger
            finally:
                await successor.close()
        finally:
            await storage.close()

    run(scenario)


def test_a_ledger_that_is_full_or_written_after_its_close_is_not_resumed(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    config = make_config(
        managed_ledger_max_entries_per_ledger=4, managed_ledger_min_ledger_rollover_time_minutes=0
    )

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("full")
            told = [await ml.append(b"f%d" % i, 0) for i in range(4)]
            await ml.close()
            reopened = await storage.open_managed_ledger("full")
            infos = reopened.ledgers()
            assert [(i.ledger_id, i.entries) for i in infos[:-1]] == [(told[0].ledger_id, 4)]
            assert infos[-1].ledger_id > told[0].ledger_id

            ml = await storage.open_managed_ledger("late")
            told = [await ml.append(b"l%d" % i, 0) for i in range(2)]
            await ml.close()
            # A record lands after the close (as a write whose report timed out could):
            # the ledger keeps the two entries it was closed with, appends go elsewhere.
            topic = storage.ledger_store.topic(told[0].ledger_id)
            land_records(kafka_bootstrap, topic, [(b"stray", 7, 2)])
            reopened = await storage.open_managed_ledger("late")
            infos = reopened.ledgers()
            assert [(i.ledger_id, i.entries) for i in infos[:-1]] == [(told[0].ledger_id, 2)]
            nxt = await reopened.append(b"next", 0)
            assert nxt == Position(infos[-1].ledger_id, 0) and nxt.ledger_id > told[0].ledger_id
            entries = await reopened.read_entries(told[0], 10)
            assert [e.data for e in entries] == [b"l0", b"l1", b"next"]
        finally:
            await storage.close()

    run(scenario)
