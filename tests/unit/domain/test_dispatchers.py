"""Failover hand-overs as Pulsar makes them: once the active consumer changed nothing is
sent for ``activeConsumerFailoverDelayTimeMillis``, then every consumer is told which one
is active and the new one gets, from the rewound cursor, what is still unacknowledged."""

from __future__ import annotations

import asyncio

from dedup_broker.domain.consumer import SubscriptionType
from dedup_broker.domain.topic import Topic
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"
"""``a`` owns this name's point on the hash ring, over ``b``."""
DELAY_MS = 300
FAILOVER = SubscriptionType.FAILOVER


def at(entry: int) -> Position:
    return Position(1, entry)


async def topic_with(entries: int, delay_ms: int = DELAY_MS) -> Topic:
    topic = await MemoryBroker.configured(
        active_consumer_failover_delay_time_millis=delay_ms
    ).topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(entries):
        await publish(topic, producer, seq)
    return topic


async def after(start: float, ms: float) -> None:
    """Until ``ms`` after the loop time ``start`` (the broker's timers due by then fired)."""
    await asyncio.sleep(max(0.0, start + ms / 1000 - asyncio.get_running_loop().time()))
    await settle()


async def test_the_first_consumer_waits_the_delay_too() -> None:
    topic = await topic_with(3)
    side = ConsumerSide()
    start = asyncio.get_running_loop().time()
    b = await subscribe(topic, side, "b", sub_type=FAILOVER)
    b.subscription.on_flow(b, 10)
    await settle()
    assert side.take() == []
    assert b.subscription.active_consumer is b  # chosen at once (the stats name it)
    await after(start, DELAY_MS + 50)
    assert side.take() == [("b", at(0), 0), ("b", at(1), 0), ("b", at(2), 0)]
    assert side.active_changes == [("b", True)]


async def test_the_new_active_consumer_gets_what_the_other_left_unacknowledged() -> None:
    """``b`` received 0..3; ``a`` joins and takes over. While the delay runs nobody gets
    anything and ``b`` acknowledges 0 and 1; then ``a`` gets 2 and 3 again, and what
    comes next."""
    topic = await topic_with(4)
    side = ConsumerSide()
    b = await subscribe(topic, side, "b", sub_type=FAILOVER)
    b.subscription.on_flow(b, 10)
    await after(asyncio.get_running_loop().time(), DELAY_MS + 50)
    assert side.positions_of("b") == [at(i) for i in range(4)]
    side.take()
    side.active_changes.clear()
    joined = asyncio.get_running_loop().time()
    a = await subscribe(topic, side, "a", sub_type=FAILOVER)
    subscription = a.subscription
    subscription.on_flow(a, 10)
    assert subscription.active_consumer is a
    await after(joined, DELAY_MS / 2)
    subscription.on_ack(b, [at(0), at(1)], cumulative=False)
    assert side.take() == [] and side.active_changes == []
    await after(joined, DELAY_MS + 50)
    assert side.active_changes == [("b", False), ("a", True)]
    assert side.take() == [("a", at(2), 1), ("a", at(3), 1)]
    producer = new_producer("q", 2)
    topic.add_producer(producer)
    await publish(topic, producer, 0)
    await settle()
    assert side.take() == [("a", at(4), 0)]


async def test_a_change_during_the_delay_does_not_put_it_off() -> None:
    """As Pulsar: the hand-over that runs when another consumer takes over keeps its time."""
    topic = await topic_with(2)
    side = ConsumerSide()
    start = asyncio.get_running_loop().time()
    b = await subscribe(topic, side, "b", sub_type=FAILOVER)
    b.subscription.on_flow(b, 10)
    await after(start, DELAY_MS / 2)
    a = await subscribe(topic, side, "a", sub_type=FAILOVER)
    a.subscription.on_flow(a, 10)
    await after(start, DELAY_MS + DELAY_MS / 4)
    assert side.take() == [("a", at(0), 0), ("a", at(1), 0)]
    assert side.active_changes == [("b", False), ("a", True)]


async def test_when_the_active_consumer_leaves_the_next_waits_the_delay() -> None:
    topic = await topic_with(2)
    side = ConsumerSide()
    a = await subscribe(topic, side, "a", sub_type=FAILOVER)
    b = await subscribe(topic, side, "b", sub_type=FAILOVER)
    a.subscription.on_flow(a, 10)
    b.subscription.on_flow(b, 10)
    await after(asyncio.get_running_loop().time(), DELAY_MS + 50)
    assert side.take() == [("a", at(0), 0), ("a", at(1), 0)]
    left = asyncio.get_running_loop().time()
    topic.consumer_closed(a)
    await settle()
    assert b.subscription.active_consumer is b
    assert side.take() == []
    await after(left, DELAY_MS + 50)
    assert side.take() == [("b", at(0), 1), ("b", at(1), 1)]


async def test_exclusive_subscriptions_do_not_wait() -> None:
    topic = await topic_with(1, delay_ms=10_000)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "only")
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    assert side.take() == [("only", at(0), 0)]
