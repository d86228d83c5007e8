"""Subscriptions: who gets which entry (Exclusive, Shared, Failover), permits, acks moving
the cursor, redelivery with its count, and the unacked limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dedup_broker.domain.consumer import Consumer, ConsumerBusyError, SubscriptionType
from dedup_broker.domain.topic import Topic
from dedup_broker.storage.api import Entry
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"
SHARED, FAILOVER = SubscriptionType.SHARED, SubscriptionType.FAILOVER


def at(entry: int) -> Position:
    return Position(1, entry)


async def topic_with(entries: int, **settings: object) -> Topic:
    topic = await MemoryBroker.configured(**settings).topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(entries):
        await publish(topic, producer, seq)
    return topic


async def test_exclusive_refuses_a_second_consumer_and_another_type() -> None:
    topic = await topic_with(0)
    side = ConsumerSide()
    await subscribe(topic, side, "a")
    with pytest.raises(ConsumerBusyError, match=r"^exclusive subscription 'sub' already has"):
        await subscribe(topic, side, "b")
    with pytest.raises(ConsumerBusyError, match=r"^subscription 'sub' is of type EXCLUSIVE, not"):
        await subscribe(topic, side, "c", sub_type=SHARED)


async def test_permits_bound_what_is_sent() -> None:
    topic = await topic_with(5)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a")
    consumer.subscription.on_flow(consumer, 2)
    await settle()
    assert side.take() == [("a", at(0), 0), ("a", at(1), 0)]
    assert consumer.permits == 0
    consumer.subscription.on_flow(consumer, 1)
    await settle()
    assert side.take() == [("a", at(2), 0)]


async def test_new_entries_reach_a_waiting_consumer() -> None:
    topic = await topic_with(0)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a", initial_position="latest")
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    assert side.take() == []
    producer = topic.producers["p"]
    await publish(topic, producer, 0)
    await settle()
    assert side.take() == [("a", at(0), 0)]


async def test_shared_spreads_entries_over_consumers_with_permits() -> None:
    topic = await topic_with(6)
    side = ConsumerSide()
    a = await subscribe(topic, side, "a", sub_type=SHARED)
    b = await subscribe(topic, side, "b", sub_type=SHARED)
    c = await subscribe(topic, side, "c", sub_type=SHARED)
    subscription = a.subscription
    subscription.on_flow(a, 2)
    subscription.on_flow(b, 4)
    subscription.on_flow(c, 0)
    await settle()
    assert sorted(side.positions_of("a") + side.positions_of("b")) == [at(i) for i in range(6)]
    assert (len(side.positions_of("a")), len(side.positions_of("b"))) == (2, 4)
    assert side.positions_of("c") == []
    assert c.permits == 0


async def test_shared_serves_the_best_priority_level_first() -> None:
    """Pulsar's priority levels: 0 before 1; a lower level gets entries only while every
    consumer of the higher one is out of permits."""
    topic = await topic_with(0)
    side = ConsumerSide()
    low = await subscribe(topic, side, "low", sub_type=SHARED, priority_level=1)
    high_a = await subscribe(topic, side, "high-a", sub_type=SHARED, priority_level=0)
    high_b = await subscribe(topic, side, "high-b", sub_type=SHARED, priority_level=0)
    for consumer, permits in ((low, 10), (high_a, 3), (high_b, 3)):
        low.subscription.on_flow(consumer, permits)
    producer = new_producer("later")
    topic.add_producer(producer)
    for seq in range(10):
        await publish(topic, producer, seq)
    await settle()
    assert (len(side.positions_of("high-a")), len(side.positions_of("high-b"))) == (3, 3)
    assert side.positions_of("low") == [at(i) for i in range(6, 10)]


async def test_cumulative_and_individual_acks_move_the_cursor() -> None:
    topic = await topic_with(5)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a", sub_type=SHARED)
    subscription = consumer.subscription
    subscription.on_flow(consumer, 5)
    await settle()
    subscription.on_ack(consumer, [at(2), at(4)], cumulative=False)
    assert subscription.cursor.mark_delete_position == Position(1, -1)
    assert subscription.backlog() == 3
    subscription.on_ack(consumer, [at(0), at(1)], cumulative=False)
    assert subscription.cursor.mark_delete_position == at(2)  # over the acked run
    subscription.on_ack(consumer, [at(3)], cumulative=True)
    assert subscription.cursor.mark_delete_position == at(4)
    assert (subscription.backlog(), consumer.unacked_messages) == (0, 0)


async def test_a_nack_on_shared_redelivers_that_entry_with_a_growing_count() -> None:
    topic = await topic_with(2)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a", sub_type=SHARED)
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    side.take()
    for count in (1, 2):
        consumer.subscription.on_redeliver(consumer, [at(0)])
        await settle()
        assert side.take() == [("a", at(0), count)]


async def test_a_nack_on_exclusive_sends_everything_in_flight_again_in_order() -> None:
    topic = await topic_with(3)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a")
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    consumer.subscription.on_ack(consumer, [at(0)], cumulative=True)
    side.take()
    consumer.subscription.on_redeliver(consumer, [at(2)])
    await settle()
    assert side.take() == [("a", at(1), 1), ("a", at(2), 1)]


async def test_entries_of_a_consumer_that_left_go_to_another() -> None:
    topic = await topic_with(3)
    side = ConsumerSide()
    a = await subscribe(topic, side, "a", sub_type=SHARED)
    b = await subscribe(topic, side, "b", sub_type=SHARED)
    a.subscription.on_flow(a, 3)
    await settle()
    assert side.take() == [("a", at(0), 0), ("a", at(1), 0), ("a", at(2), 0)]
    a.subscription.on_ack(a, [at(1)], cumulative=False)
    topic.consumer_closed(a)
    b.subscription.on_flow(b, 10)
    await settle()
    assert side.take() == [("b", at(0), 1), ("b", at(2), 1)]


async def test_failover_has_one_active_consumer_and_hands_over_its_entries() -> None:
    topic = await topic_with(2, active_consumer_failover_delay_time_millis=0)
    side = ConsumerSide()
    b = await subscribe(topic, side, "b", sub_type=FAILOVER)
    a = await subscribe(topic, side, "a", sub_type=FAILOVER)
    # "a" owns the topic name's point on the hash ring: it took over when it came.
    assert side.active_changes == [("b", True), ("b", False), ("a", True)]
    assert a.subscription.active_consumer is a
    subscription = a.subscription
    subscription.on_flow(b, 10)
    subscription.on_flow(a, 1)
    await settle()
    assert side.take() == [("a", at(0), 0)]
    side.active_changes.clear()
    topic.consumer_closed(a)
    await settle()
    assert side.active_changes == [("b", True)]
    assert side.take() == [("b", at(0), 1), ("b", at(1), 0)]


async def test_a_shared_consumer_stops_at_the_unacked_limit_until_it_acks() -> None:
    topic = await topic_with(
        4, max_unacked_messages_per_consumer=2, dispatcher_max_read_batch_size=1
    )
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a", sub_type=SHARED)
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    assert side.take() == [("a", at(0), 0), ("a", at(1), 0)]
    consumer.subscription.on_ack(consumer, [at(0)], cumulative=False)
    await settle()
    assert side.take() == [("a", at(2), 0)]
    assert consumer.unacked_messages == 2


async def test_a_consumer_that_cannot_write_waits() -> None:
    topic = await topic_with(1)
    side = ConsumerSide(writable=False)
    consumer = await subscribe(topic, side, "a")
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    assert side.take() == []
    side.writable = True
    consumer.subscription.trigger()
    await settle()
    assert side.take() == [("a", at(0), 0)]


class SlowReads:
    """Holds the subscription's next cursor read until ``release()``: a consumer may come
    and go while a read is in flight (a cold Kafka fetch on a topic just loaded). The
    cursor has slots, so the read is held by a subclass it is switched to meanwhile."""

    def __init__(self, consumer: Consumer) -> None:
        self.cursor = consumer.subscription.cursor
        self.started = asyncio.Event()
        self.gate = asyncio.Event()
        plain = type(self.cursor)
        slow = self

        async def held(cursor: Any, max_entries: int, *args: Any) -> list[Entry]:
            slow.started.set()
            await slow.gate.wait()
            cursor.__class__ = plain
            result: list[Entry] = await cursor.read_entries(max_entries, *args)
            return result

        self.cursor.__class__ = type("HeldReads", (plain,), {"__slots__": (), "read_entries": held})

    async def release(self) -> None:
        self.gate.set()
        await settle()


@pytest.mark.parametrize(
    "sub_type", [SubscriptionType.EXCLUSIVE, FAILOVER, SHARED, SubscriptionType.KEY_SHARED]
)
async def test_entries_read_for_a_consumer_that_left_meanwhile_reach_the_next(
    sub_type: SubscriptionType,
) -> None:
    """A consumer whose connection drops while the first read of its subscription is in
    flight has nothing in flight yet; the entries read for it must go to the consumer that
    comes next, from the first one (the cursor must not stand past them)."""
    topic = await topic_with(5, active_consumer_failover_delay_time_millis=0)
    side = ConsumerSide()
    gone = await subscribe(topic, side, "gone", sub_type=sub_type)
    slow = SlowReads(gone)
    gone.subscription.on_flow(gone, 10)
    await asyncio.wait_for(slow.started.wait(), 5)
    gone.subscription.consumer_left(gone)
    await slow.release()
    assert side.positions_of("gone") == []
    next_one = await subscribe(topic, side, "next", sub_type=sub_type)
    next_one.subscription.on_flow(next_one, 10)
    await settle()
    assert side.positions_of("next") == [at(i) for i in range(5)]
