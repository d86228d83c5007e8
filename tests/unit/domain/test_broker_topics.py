"""The broker's topics: loading (once), creation rules, partitioned metadata, deletion, and
what a reloaded topic remembers."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.domain.consumer import SubscriptionType
from dedup_broker.domain.partitioned import InvalidPartitionsError, TopicExistsError
from dedup_broker.domain.registry import PartitionedTopicError, TopicBusyError
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import ServiceNotReadyError, StorageError, TopicNotFoundError
from dedup_broker.schema.compatibility import SchemaInfo, SchemaType
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, ProducerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"


def name(text: str) -> TopicName:
    return TopicName.parse(text)


async def test_concurrent_first_uses_load_the_topic_once() -> None:
    broker = MemoryBroker()
    first, second = await asyncio.gather(broker.topic(TOPIC), broker.topic(TOPIC))
    assert first is second
    assert broker.broker.namespaces.list_topics("public/default") == [TOPIC]


async def test_a_failed_load_reaches_every_waiter_and_a_later_use_retries() -> None:
    broker = MemoryBroker()
    broker.storage.open_failure = StorageError("Kafka is unreachable")
    results = await asyncio.gather(broker.topic(TOPIC), broker.topic(TOPIC), return_exceptions=True)
    assert [str(r) for r in results] == ["Kafka is unreachable"] * 2
    broker.storage.open_failure = None
    assert (await broker.topic(TOPIC)).name == name(TOPIC)


async def test_without_auto_creation_only_existing_topics_load() -> None:
    broker = MemoryBroker.configured(allow_auto_topic_creation=False)
    with pytest.raises(
        TopicNotFoundError, match=rf"^managed ledger {name(TOPIC).managed_ledger_name}"
    ):
        await broker.topic(TOPIC)
    broker.storage.ledger(name(TOPIC).managed_ledger_name)
    assert (await broker.topic(TOPIC)).name == name(TOPIC)


async def test_partitioned_topics_have_metadata_and_their_partitions_load() -> None:
    broker = MemoryBroker.configured(allow_auto_topic_creation=False)
    domain = broker.broker
    await domain.partitioned_topics.create_partitioned_topic(name(TOPIC), 2)
    assert domain.partitioned_topics.partitions_of(name(TOPIC)) == 2
    with pytest.raises(TopicExistsError):
        await domain.partitioned_topics.create_partitioned_topic(name(TOPIC), 3)
    with pytest.raises(InvalidPartitionsError):
        await domain.partitioned_topics.update_partitions(name(TOPIC), 2)
    await domain.partitioned_topics.update_partitions(name(TOPIC), 3)
    with pytest.raises(PartitionedTopicError):
        await broker.topic(TOPIC)
    assert (await broker.topic(TOPIC + "-partition-2")).name.partition_index == 2
    with pytest.raises(TopicNotFoundError, match="has 3 partitions"):
        await broker.topic(TOPIC + "-partition-3")
    assert domain.partitioned_topics.list_partitioned_topics("public/default") == [TOPIC]
    assert domain.namespaces.topics_of_namespace("public/default") == [
        f"{TOPIC}-partition-{i}" for i in range(3)
    ]


async def test_deleting_a_busy_topic_needs_force_and_tells_its_clients() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    side = ProducerSide()
    topic.add_producer(new_producer("p", side=side))
    with pytest.raises(TopicBusyError):
        await broker.broker.topic_registry.delete_topic(name(TOPIC))
    await broker.broker.topic_registry.delete_topic(name(TOPIC), force=True)
    assert side.closed == ["p"]
    assert not broker.broker.topic_registry.topic_exists(name(TOPIC))
    with pytest.raises(TopicNotFoundError):
        await broker.broker.topic_registry.delete_topic(name(TOPIC))


async def test_a_reloaded_topic_keeps_durable_subscriptions_where_they_were_acked() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(4):
        await publish(topic, producer, seq)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a", sub_type=SubscriptionType.SHARED)
    consumer.subscription.on_flow(consumer, 4)
    await settle()
    consumer.subscription.on_ack(consumer, [Position(1, 0), Position(1, 2)], cumulative=False)

    restarted = await broker.restarted()
    assert side.closed == ["a"]
    reloaded = await restarted.topic(TOPIC)
    assert list(reloaded.subscriptions) == ["sub"]
    again = await subscribe(reloaded, side, "a", sub_type=SubscriptionType.SHARED)
    again.subscription.on_flow(again, 10)
    side.take()
    await settle()
    assert side.take() == [("a", Position(1, 1), 0), ("a", Position(1, 3), 0)]


async def test_a_closing_broker_loads_nothing_more() -> None:
    broker = MemoryBroker()
    await broker.broker.close()
    with pytest.raises(ServiceNotReadyError):
        await broker.topic(TOPIC)


async def test_a_deleted_topic_takes_its_schemas_with_it() -> None:
    broker = MemoryBroker()
    domain = broker.broker
    json_schema = SchemaInfo(SchemaType.JSON, b'{"type": "record", "name": "R", "fields": []}')
    await broker.topic(TOPIC)
    await domain.schemas.register(name(TOPIC), json_schema)
    await domain.topic_registry.delete_topic(name(TOPIC))
    assert domain.schemas.versions(name(TOPIC)) == []
    # Another type is the topic's first schema again (numbers are not reused).
    stored = await domain.schemas.register(name(TOPIC), SchemaInfo(SchemaType.STRING, b""))
    assert stored.version == 1


async def test_a_partitioned_topics_schemas_go_with_it_not_with_a_partition() -> None:
    broker = MemoryBroker()
    domain = broker.broker
    await domain.partitioned_topics.create_partitioned_topic(name(TOPIC), 2)
    await broker.topic(TOPIC + "-partition-0")
    await domain.schemas.register(name(TOPIC), SchemaInfo(SchemaType.STRING, b""))
    await domain.topic_registry.delete_topic(name(TOPIC + "-partition-0"))
    assert len(domain.schemas.versions(name(TOPIC))) == 1
    await domain.topic_registry.delete_partitioned_topic(name(TOPIC))
    assert domain.schemas.versions(name(TOPIC)) == []


async def test_a_topic_used_again_while_it_unloads_loads_after_the_close() -> None:
    """A client reconnecting during an unload gets a topic of its own: never one that
    shares the managed ledger the unloading topic closes at the end of its close."""
    broker = MemoryBroker()
    old = await broker.topic(TOPIC)
    writer = new_producer("p")
    old.add_producer(writer)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    in_flight = asyncio.create_task(publish(old, writer, 0))
    await settle()
    unloading = asyncio.create_task(broker.broker.topic_registry.unload_topic(name(TOPIC)))
    await settle()  # the close waits for the write in flight
    reloading = asyncio.create_task(broker.topic(TOPIC))
    await settle()
    ledger.hold_appends = False
    ledger.acknowledge_appends()
    await in_flight
    await unloading
    again = await reloading
    assert again is not old
    assert again.managed_ledger is not old.managed_ledger
    assert again.managed_ledger.state == "Open"
    producer = new_producer("p")
    again.add_producer(producer)
    assert (await publish(again, producer, 0)).error is None
