"""The ledger catalog on the real Kafka: what a process that is not a broker (a deletion
worker, the doctor) learns about a cluster's ledgers, and deleting a ledger's topic."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from dedup_broker.storage import formats
from dedup_broker.storage.formats import broker_key, broker_record
from dedup_broker.storage.service.catalog import KafkaLedgerCatalog, LedgerHeaderError
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, run

SMALL_LEDGERS = {
    "managed_ledger_max_entries_per_ledger": 3,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
}


def test_lists_headers_and_allocations_match_what_the_broker_stored(
    make_config: ConfigFactory,
) -> None:
    config = make_config(**SMALL_LEDGERS)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        catalog = KafkaLedgerCatalog(config)
        try:
            ml = await storage.open_managed_ledger("public/default/persistent/cat")
            await ml.cursors.open("sub", "earliest")
            for i in range(7):
                await ml.append(b"e%d" % i, 0)
            ids = [info.ledger_id for info in ml.ledgers()]
            assert len(ids) == 3

            stored = await catalog.stored_ledgers("public/default/persistent/cat")
            assert stored is not None and [info.ledger_id for info in stored] == ids
            assert [info.entries for info in stored[:2]] == [3, 3]  # the closed ones
            assert await catalog.stored_ledgers("public/default/persistent/none") is None
            assert await catalog.managed_ledgers() == {"public/default/persistent/cat": stored}
            assert await catalog.ledger_ids() == ids
            for ledger_id in ids:
                assert await catalog.ledger_exists(ledger_id)
                assert await catalog.allocated_for(ledger_id) == "public/default/persistent/cat"
                header = await catalog.ledger_header(ledger_id)
                assert header is not None
                assert (header.ledger_id, header.managed_ledger_name, header.component) == (
                    ledger_id,
                    "public/default/persistent/cat",
                    "MANAGED_LEDGER",
                )
                assert header.cursor_name == ""
            # Ids past the end of the allocations and negative ids were never allocated.
            assert await catalog.allocated_for(ids[-1] + 1000) is None
            assert await catalog.allocated_for(-1) is None
            assert not await catalog.ledger_exists(ids[-1] + 1000)

            # Later changes are seen without reopening the catalog.
            for i in range(3):
                await ml.append(b"f%d" % i, 0)
            stored = await catalog.stored_ledgers("public/default/persistent/cat")
            assert stored is not None
            assert [info.ledger_id for info in stored] == [i.ledger_id for i in ml.ledgers()]
            assert len(stored) == 4
            await storage.delete_managed_ledger("public/default/persistent/cat")
            assert await catalog.stored_ledgers("public/default/persistent/cat") is None
            assert await catalog.managed_ledgers() == {}
        finally:
            await catalog.close()
            await storage.close()

    run(scenario)


def test_deleting_a_ledger_topic_says_whether_it_existed(make_config: ConfigFactory) -> None:
    config = make_config(**SMALL_LEDGERS)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        catalog = KafkaLedgerCatalog(config)
        try:
            ml = await storage.open_managed_ledger("doomed")
            for i in range(4):
                await ml.append(b"e%d" % i, 0)
            first, second = [info.ledger_id for info in ml.ledgers()]
            assert await catalog.delete_ledger(first)
            # Kafka deletes a topic asynchronously: its metadata may list it for a moment.
            deadline = asyncio.get_running_loop().time() + 30
            while await catalog.ledger_exists(first):
                assert asyncio.get_running_loop().time() < deadline, "the topic stayed"
                await asyncio.sleep(0.2)
            assert await catalog.ledger_ids() == [second]
            assert not await catalog.delete_ledger(first)
            assert not await catalog.delete_ledger(second + 1000)
            # The allocation record outlives the topic.
            assert await catalog.allocated_for(first) == "doomed"
        finally:
            await catalog.close()
            await storage.close()

    run(scenario)


def test_topics_named_like_ledgers_that_are_not_ledgers(
    make_config: ConfigFactory, admin: AdminClient, kafka_bootstrap: str
) -> None:
    config = make_config()
    cluster = config.cluster_name
    empty, foreign = 10**6, 10**6 + 1
    topics = [formats.ledger_topic(cluster, empty), formats.ledger_topic(cluster, foreign)]
    topics.append(f"{cluster}.ledger.007")  # not the name of any ledger id
    for future in admin.create_topics([NewTopic(t, 1) for t in topics]).values():
        future.result()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(formats.ledger_topic(cluster, foreign), b"not a ledger header", partition=0)
    assert producer.flush(10) == 0

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        catalog = KafkaLedgerCatalog(config)
        try:
            assert await catalog.ledger_ids() == [empty, foreign]
            # Created, its header never written (a crash mid-create): nothing to say.
            assert await catalog.ledger_header(empty) is None
            with pytest.raises(LedgerHeaderError, match="not a ledger header"):
                await catalog.ledger_header(foreign)
            assert await catalog.allocated_for(empty) is None
        finally:
            await catalog.close()
            await storage.close()

    run(scenario)


def test_registered_brokers_admin_urls(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        catalog = KafkaLedgerCatalog(config)
        try:
            assert await catalog.broker_admin_urls() == []
            await storage.policies.put(
                broker_key("b1", 6650), broker_record("http://b1:8080", "b1:6650/1")
            )
            await storage.policies.put(
                broker_key("b2", 6650), broker_record("http://b2:8080", "b2:6650/1")
            )
            await storage.policies.put("brokers/garbled", b"{not json")
            assert await catalog.broker_admin_urls() == ["http://b1:8080", "http://b2:8080"]
            await storage.policies.delete(broker_key("b1", 6650))
            assert await catalog.broker_admin_urls() == ["http://b2:8080"]
        finally:
            await catalog.close()
            await storage.close()

    run(scenario)


def test_a_catalog_needs_no_running_broker(make_config: ConfigFactory) -> None:
    """Built from the configuration alone; reading an empty cluster answers empty."""
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)  # creates the internal topics
        await storage.close()
        catalog = KafkaLedgerCatalog(config)
        try:
            results = await asyncio.gather(
                catalog.managed_ledgers(), catalog.ledger_ids(), catalog.broker_admin_urls()
            )
            assert results == [{}, [], []]
            assert await catalog.allocated_for(0) is None
        finally:
            await catalog.close()

    run(scenario)
