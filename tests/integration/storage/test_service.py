"""The storage service: opening, listing and deleting managed ledgers; metadata tables."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from dedup_broker.errors import TopicNotFoundError
from dedup_broker.storage.kafka.fencing import fence_partition
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, read_topic, run


def test_internal_topics_are_created_compacted(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
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


def test_fences_have_a_partition_per_slot_and_an_older_topic_grows(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    """Each slot's proofs in a partition of its own: a Kafka node's loss stalls the slots
    whose partition it led, not every slot. A one-partition topic of an earlier version
    grows at start."""
    config = make_config()
    fences = f"{config.cluster_name}.fences"
    admin.create_topics([NewTopic(fences, 1, 1)])[fences].result()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        await storage.close()

    run(scenario)
    deadline = time.monotonic() + 10  # the growth reaches every node's metadata in a moment
    partitions = admin.list_topics(fences, timeout=10).topics[fences].partitions
    while len(partitions) < config.cluster_ownership_slots and time.monotonic() < deadline:
        time.sleep(0.2)
        partitions = admin.list_topics(fences, timeout=10).topics[fences].partitions
    assert len(partitions) == config.cluster_ownership_slots
    assert sorted({fence_partition(slot, len(partitions)) for slot in range(16)}) == list(range(16))


def test_concurrent_opens_share_one_instance(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config())
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
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("doomed")
            await asyncio.gather(*(ml.append(b"d", 0) for _ in range(5)))
            await ml.cursors.open("a")
            await ml.cursors.open("b", "earliest")
            keep = await storage.open_managed_ledger("kept")
            await keep.cursors.open("a")
            ledger_topics.extend(storage.ledger_store.topic(i.ledger_id) for i in ml.ledgers())
            assert len(ledger_topics) == 3
            await storage.delete_managed_ledger("doomed")
            assert ml.state == "Closed"
            assert not storage.managed_ledger_exists("doomed")
            assert storage.list_managed_ledgers() == ["kept"]
            # Kafka deletes topics asynchronously: their names leave its metadata soon.
            deadline = time.monotonic() + 30
            while set(admin.list_topics(timeout=10).topics) & set(ledger_topics):
                assert time.monotonic() < deadline, "ledger topics still listed after 30 s"
                await asyncio.sleep(0.2)
            try:
                await storage.delete_managed_ledger("doomed")
            except TopicNotFoundError:
                pass
            else:
                raise AssertionError("deleting twice must fail")
        finally:
            await storage.close()
        fresh = await KafkaStorage.start(config)
        try:
            assert fresh.list_managed_ledgers() == ["kept"]
            reborn = await fresh.open_managed_ledger("doomed")
            assert reborn.cursors.stored_names() == [] and reborn.number_of_entries() == 0
            kept = await fresh.open_managed_ledger("kept")
            assert kept.cursors.stored_names() == ["a"]
        finally:
            await fresh.close()

    run(scenario)
    cursor_keys = [m.key() for m in read_topic(kafka_bootstrap, f"{config.cluster_name}.cursors")]
    assert cursor_keys.count(b"doomed\x00a") == 2  # the state, then its tombstone


def test_metadata_table_between_two_brokers(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        one = await KafkaStorage.start(config)
        two = await KafkaStorage.start(config)
        try:
            await one.policies.put("ns/public/default", b"dedup=true")
            await one.policies.put("ns/public/other", b"dedup=false")
            await one.policies.put("topic/x", b"3")
            assert one.policies.get("ns/public/default") == b"dedup=true"
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
        three = await KafkaStorage.start(config)
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
        storage = await KafkaStorage.start(config)
        ml = await storage.open_managed_ledger("props")
        await ml.set_properties({"owner": "team-a", "retention": "7d"})
        await storage.close()
        again = await KafkaStorage.start(config)
        try:
            assert (await again.open_managed_ledger("props")).properties == {
                "owner": "team-a",
                "retention": "7d",
            }
        finally:
            await again.close()

    run(scenario)


def test_refresh_sees_the_fenced_writes_of_the_previous_holder(
    make_config: ConfigFactory,
) -> None:
    """Writes made in a write fence's transactions show in the view of the broker that
    takes the fence over, after its refresh (through the table tail)."""
    config = make_config()

    async def scenario() -> None:
        one = await KafkaStorage.start(config)
        two = await KafkaStorage.start(config)
        try:
            fence = await one.acquire_fence(1)
            for i in range(20):
                offset = await fence.send(one.policies.topic, b"v%d" % i, key=b"k%d" % (i % 5))
                assert offset >= 0
            # Taking the fence waits for the old holder's transactions to be completed
            # (committed or aborted), as a broker taking over a slot does.
            new_fence = await two.acquire_fence(1)
            await two.policies.refresh()
            assert [two.policies.get(f"k{k}") for k in range(5)] == [
                b"v15",
                b"v16",
                b"v17",
                b"v18",
                b"v19",
            ]
            await one.policies.put("after", b"yes")
            await two.policies.refresh()
            assert two.policies.get("after") == b"yes"
            assert two.policies.get("k0") == b"v15"
            await fence.close()
            await new_fence.close()
        finally:
            await one.close()
            await two.close()

    run(scenario)


def test_refresh_reads_on_its_own_when_the_tail_stops(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        one = await KafkaStorage.start(config)
        two = await KafkaStorage.start(config)
        try:
            await asyncio.to_thread(two._tail.close)
            for i in range(3):
                await one.policies.put("key", b"%d" % i)
                await two.policies.refresh()
                assert two.policies.get("key") == b"%d" % i
        finally:
            await one.close()
            await two.close()

    run(scenario)


def test_opening_while_a_close_is_under_way_gets_a_fresh_ledger(
    make_config: ConfigFactory,
) -> None:
    """A client reconnecting during an unload: it must get the ledger opened again after
    the close, never the one being closed (whose appends and reads fail from then on)."""

    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config())
        try:
            old = await storage.open_managed_ledger("t")
            appends = [old.append(b"before-%d" % i, 0) for i in range(20)]
            closing = asyncio.create_task(old.close())
            await asyncio.sleep(0)
            again = await storage.open_managed_ledger("t")
            assert again is not old and closing.done() and again.state == "Open"
            before = [await a for a in appends]
            after = await again.append(b"after", 0)
            assert after > before[-1]
            entries = await again.read_entries(again.first_position(), 100)
            assert [e.data for e in entries] == [b"before-%d" % i for i in range(20)] + [b"after"]
        finally:
            await storage.close()

    run(scenario)
