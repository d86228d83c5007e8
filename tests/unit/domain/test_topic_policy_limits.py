"""The limits of a topic's policies (and its namespace's) in effect when clients attach:
unacknowledged messages per consumer, producers, consumers per topic and subscription."""

from __future__ import annotations

import pytest

from dedup_broker.domain.consumer import ConsumerBusyError, SubscriptionType
from dedup_broker.domain.producer_access import ProducerBusyError
from dedup_broker.domain_base.names import TopicName
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/limited"
NAME = TopicName.parse(TOPIC)
SHARED = SubscriptionType.SHARED


async def test_a_consumer_keeps_the_unacked_limit_that_applied_when_it_subscribed() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(6):
        await publish(topic, producer, seq)
    await broker.policies.set_namespace_value(
        "public/default", "max_unacked_messages_per_consumer", 3
    )
    await broker.policies.set_topic_value(NAME, "max_unacked_messages_per_consumer", 2)
    side = ConsumerSide()
    first = await subscribe(topic, side, "a", sub_type=SHARED)
    await broker.policies.set_topic_value(NAME, "max_unacked_messages_per_consumer", None)
    second = await subscribe(topic, side, "b", sub_type=SHARED)
    assert (first.max_unacked_messages, second.max_unacked_messages) == (2, 3)
    first.subscription.on_flow(first, 10)
    await settle()
    assert side.positions_of("a") == [Position(1, 0), Position(1, 1)]
    first.subscription.on_ack(first, [Position(1, 0)], cumulative=False)
    await settle()  # one more, though more are there to read: the limit bounds the read
    assert side.positions_of("a") == [Position(1, 0), Position(1, 1), Position(1, 2)]


async def test_producer_and_consumer_limits_follow_the_topic_then_its_namespace() -> None:
    broker = MemoryBroker.configured(max_producers_per_topic=5)
    topic = await broker.topic(TOPIC)
    await broker.policies.set_namespace_value("public/default", "max_producers_per_topic", 1)
    await topic.attach_producer(new_producer("p1"))
    with pytest.raises(ProducerBusyError, match="reached max producers limit"):
        await topic.attach_producer(new_producer("p2", producer_id=2))
    await broker.policies.set_topic_value(NAME, "max_producers_per_topic", 2)
    await topic.attach_producer(new_producer("p2", producer_id=2))

    await broker.policies.set_topic_value(NAME, "max_consumers_per_subscription", 1)
    await broker.policies.set_namespace_value("public/default", "max_consumers_per_topic", 2)
    side = ConsumerSide()
    await subscribe(topic, side, "a", sub_type=SHARED)
    with pytest.raises(ConsumerBusyError, match="maxConsumersPerSubscription=1"):
        await subscribe(topic, side, "b", sub_type=SHARED)
    await subscribe(topic, side, "c", subscription="other")
    with pytest.raises(ConsumerBusyError, match="maxConsumersPerTopic=2"):
        await subscribe(topic, side, "d", subscription="third")
