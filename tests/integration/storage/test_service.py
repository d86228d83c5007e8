"""The storage service: opening, listing and deleting managed ledgers; metadata tables."""

from __future__ import annotations

import asyncio

from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from dedup_broker.errors import TopicNotFoundError
from dedup_broker.storage import StorageService
from tests.integration.storage.helpers import ConfigFactory, read_topic, run


def test_internal_topics_are_created_compacted(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await StorageService.start(config)
        await storage.close()

    run(scenario)
    cluster = config.cluster_name
    expected = {
        f"{cluster}.managed-ledgers": "compact",
        f"{cluster}.cursors": "compact",
        f"{cluster}.policies": "compact",
        f"{cluster}.ledger-ids": "delete",
    }
    for topic, policy in expected.items():
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        settings = admin.describe_configs([resource])[resource].result()
        assert settings["cleanup.policy"].value == policy, topic
        assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 1


def test_concurrent_opens_share_one_instance(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await StorageService.start(make_config())
        try:
            assert not storage.managed_ledger_exists("t")
            try:
                await storage.open_managed_ledger("t", create=False)
            except TopicNotFoundError:
                pass
            else:
                raise AssertionError("opening a missing ledger without create must fail")
            opened = await asyncio.gather(*(storage.open_managed_ledger("t") for _ in range(5)))
            assert all(ml is opened[0] for ml in opened)
            assert len(opened[0].ledgers()) == 1
            assert storage.managed_ledger_exists("t")
            await storage.open_managed_ledger("u")
            assert storage.list_managed_ledgers() == ["t", "u"]
            assert await storage.open_managed_ledger("t", create=False) is opened[0]
        finally:
            await storage.close()

    run(scenario)


def test_delete_managed_ledger_removes_everything(
    make_config: ConfigFactory, admin: AdminClient, kafka_bootstrap: str
) -> None:
    config = make_config(
        managed_ledger_max_entries_per_ledger=2, managed_ledger_min_ledger_rollover_time_minutes=0
    )
    ledger_topics: list[str] = []

    async def scenario() -> None:
        storage = await StorageService.start(config)
        try:
            ml = await storage.open_managed_ledger("doomed")
            await asyncio.gather(*(ml.append(b"d", 0) for _ in range(5)))
            await ml.open_cursor("a")
            await ml.open_cursor("b", "earliest")
            keep = await storage.open_managed_ledger("kept")
            await keep.open_cursor("a")
            ledger_topics.extend(storage.ledger_store.topic(i.ledger_id) for i in ml.ledgers())
            assert len(ledger_topics) == 3
            await storage.delete_managed_ledger("doomed")
            assert ml.state == "Closed"
            assert not storage.managed_ledger_exists("doomed")
            assert storage.list_managed_ledgers() == ["kept"]
            existing = set(admin.list_topics(timeout=10).topics)
            assert not existing & set(ledger_topics)
            try:
                await storage.delete_managed_ledger("doomed")
            except TopicNotFoundError:
                pass
            else:
                raise AssertionError("deleting twice must fail")
        finally:
            await storage.close()
        fresh = await StorageService.start(config)
        try:
            assert fresh.list_managed_ledgers() == ["kept"]
            reborn = await fresh.open_managed_ledger("doomed")
            assert reborn.stored_cursor_names() == [] and reborn.number_of_entries() == 0
            kept = await fresh.open_managed_ledger("kept")
            assert kept.stored_cursor_names() == ["a"]
        finally:
            await fresh.close()

    run(scenario)
    cursor_keys = [m.key() for m in read_topic(kafka_bootstrap, f"{config.cluster_name}.cursors")]
    assert cursor_keys.count(b"doomed\x00a") == 2  # the state, then its tombstone


def test_metadata_table_between_two_brokers(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        one = await StorageService.start(config)
        two = await StorageService.start(config)
        try:
            await one.policies.put("ns/public/default", b"dedup=true")
            await one.policies.put("ns/public/other", b"dedup=false")
            await one.policies.put("topic/x", b"3")
            assert one.policies.get("ns/public/default") == b"dedup=true"
            assert two.policies.get("ns/public/default") is None
            await two.policies.refresh()
            assert two.policies.items("ns/") == [
                ("ns/public/default", b"dedup=true"),
                ("ns/public/other", b"dedup=false"),
            ]
            await two.policies.delete("ns/public/other")
            await two.policies.put("topic/x", b"4")
            await one.policies.refresh()
            assert one.policies.items() == [
                ("ns/public/default", b"dedup=true"),
                ("topic/x", b"4"),
            ]
        finally:
            await one.close()
            await two.close()
        three = await StorageService.start(config)
        try:
            assert three.policies.items() == [
                ("ns/public/default", b"dedup=true"),
                ("topic/x", b"4"),
            ]
        finally:
            await three.close()

    run(scenario)


def test_managed_ledger_properties_are_stored(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await StorageService.start(config)
        ml = await storage.open_managed_ledger("props")
        await ml.set_properties({"owner": "team-a", "retention": "7d"})
        await storage.close()
        again = await StorageService.start(config)
        try:
            assert (await again.open_managed_ledger("props")).properties == {
                "owner": "team-a",
                "retention": "7d",
            }
        finally:
            await again.close()

    run(scenario)
