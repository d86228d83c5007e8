"""Pulsar's rates in a topic's stats: sampled per stats period from the producers' and
consumers' counters (a clock the test moves), summed into subscriptions and the topic."""

from __future__ import annotations

from typing import Any

from dedup_broker.domain.consumer import SubscriptionType
from dedup_broker.domain.non_persistent.topic import NonPersistentTopic
from dedup_broker.domain.topic import Topic
from dedup_broker.domain.topic_rates import StatsUpdates
from dedup_broker.domain_base.names import TopicName
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"
KEY_SHARED = SubscriptionType.KEY_SHARED
NON_PERSISTENT = "non-persistent://public/default/ticks"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def subscription_of(stats: dict[str, Any], name: str = "sub") -> dict[str, Any]:
    subscription: dict[str, Any] = stats["subscriptions"][name]
    return subscription


async def loaded() -> Topic:
    return await MemoryBroker().topic(TOPIC)


async def test_rates_are_the_counters_differences_over_the_stats_period() -> None:
    topic = await loaded()
    clock = Clock()
    updates = StatsUpdates(lambda: [topic], clock)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "c")
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(20):
        await publish(topic, producer, seq)
    size = topic.bytes_in // 20
    assert topic.bytes_in == 20 * size  # every message has the same size
    consumer.subscription.on_flow(consumer, 8)
    await settle()
    # Counted, but no period has passed: no rate yet.
    before = topic.stats()
    assert (before["msgRateIn"], before["msgRateOut"], before["averageMsgSize"]) == (0, 0, 0)

    clock.now += 2
    await updates.update()
    stats = topic.stats()
    assert stats["msgRateIn"] == 10.0
    assert stats["msgThroughputIn"] == 10.0 * size
    assert stats["averageMsgSize"] == size
    assert stats["msgRateOut"] == 4.0
    assert stats["msgThroughputOut"] == 4.0 * size
    [publisher] = stats["publishers"]
    assert (publisher["msgRateIn"], publisher["msgThroughputIn"]) == (10.0, 10.0 * size)
    assert publisher["averageMsgSize"] == size
    subscription = subscription_of(stats)
    assert (subscription["msgRateOut"], subscription["msgThroughputOut"]) == (4.0, 4.0 * size)
    assert subscription["msgRateRedeliver"] == 0
    [consumer_stats] = subscription["consumers"]
    assert (consumer_stats["msgRateOut"], consumer_stats["msgThroughputOut"]) == (4.0, 4.0 * size)

    # A quiet period: the rates fall to zero, the counters stay.
    clock.now += 3
    await updates.update()
    quiet = topic.stats()
    assert (quiet["msgRateIn"], quiet["msgRateOut"], quiet["averageMsgSize"]) == (0, 0, 0)
    assert (quiet["msgInCounter"], quiet["msgOutCounter"]) == (20, 8)


async def test_redelivery_requests_count_the_messages_sent_again() -> None:
    topic = await loaded()
    clock = Clock()
    updates = StatsUpdates(lambda: [topic], clock)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(10):
        await publish(topic, producer, seq)
    consumer = await subscribe(topic, ConsumerSide(), "c")
    consumer.subscription.on_flow(consumer, 8)
    await settle()
    consumer.subscription.on_ack(consumer, [Position(1, 4)], cumulative=True)  # 5 of 8
    consumer.subscription.on_redeliver(consumer, None)  # the 3 others go again
    await settle()
    clock.now += 0.5
    await updates.update()
    subscription = subscription_of(topic.stats())
    assert subscription["msgRateRedeliver"] == 6.0
    assert subscription["consumers"][0]["msgRateRedeliver"] == 6.0


async def test_negative_acknowledgements_count_only_the_messages_named() -> None:
    topic = await loaded()
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(4):
        await publish(topic, producer, seq)
    consumer = await subscribe(topic, ConsumerSide(), "c", sub_type=SubscriptionType.SHARED)
    consumer.subscription.on_flow(consumer, 4)
    await settle()
    unknown = Position(9, 9)
    consumer.subscription.on_redeliver(consumer, [Position(1, 1), Position(1, 3), unknown])
    assert (consumer.msgs_redelivered, consumer.unacked_messages) == (2, 2)


async def test_backlog_and_storage_sizes() -> None:
    topic = await loaded()
    producer = new_producer("p")
    topic.add_producer(producer)
    slow = await subscribe(topic, ConsumerSide(), "slow", subscription="slow")
    fast = await subscribe(topic, ConsumerSide(), "fast", subscription="fast")
    for seq in range(10):
        await publish(topic, producer, seq)
    size = topic.bytes_in // 10
    for consumer, acked in ((slow, 2), (fast, 7)):
        consumer.subscription.on_flow(consumer, 10)
        await settle()
        consumer.subscription.on_ack(consumer, [Position(1, acked - 1)], cumulative=True)
    stats = topic.stats()
    assert stats["storageSize"] == topic.bytes_in
    assert subscription_of(stats, "slow")["msgBacklog"] == 8
    assert subscription_of(stats, "slow")["backlogSize"] == 8 * size
    assert subscription_of(stats, "fast")["msgBacklog"] == 3
    assert subscription_of(stats, "fast")["backlogSize"] == 3 * size
    assert stats["backlogSize"] == 8 * size  # the slowest durable subscription's


async def test_idle_producers_and_consumers_carry_no_meter() -> None:
    topic = await loaded()
    clock = Clock()
    updates = StatsUpdates(lambda: [topic], clock)
    producer = new_producer("p")
    topic.add_producer(producer)
    consumer = await subscribe(topic, ConsumerSide(), "c")
    clock.now += 1
    await updates.update()
    assert (producer.rates, consumer.rates) == (None, None)
    await publish(topic, producer, 0)
    clock.now += 1
    await updates.update()
    assert producer.rates is not None and producer.rates.rates[0] == 1.0


async def test_the_brokers_update_samples_persistent_and_non_persistent_topics() -> None:
    broker = MemoryBroker()
    persistent = await broker.topic(TOPIC)
    live = await broker.broker.topic_registry.serve(TopicName.parse(NON_PERSISTENT))
    assert isinstance(live, NonPersistentTopic)
    side = ConsumerSide()
    consumer = await subscribe(live, side, "c")  # type: ignore[arg-type]
    consumer.subscription.on_flow(consumer, 100)
    clock = Clock()
    broker.broker.stats_updates = StatsUpdates(broker.broker.rated_topics, clock)
    producers = [new_producer("p"), new_producer("q")]
    for topic, producer in zip((persistent, live), producers, strict=True):
        topic.add_producer(producer)
        for seq in range(6):
            await publish(topic, producer, seq)  # type: ignore[arg-type]
    clock.now += 3
    await broker.broker.stats_updates.update()
    assert persistent.stats()["msgRateIn"] == 2.0
    stats: dict[str, Any] = live.stats()
    assert (stats["msgRateIn"], stats["msgRateOut"]) == (2.0, 2.0)
    assert stats["averageMsgSize"] == live.bytes_in / 6
    assert subscription_of(stats)["msgRateOut"] == 2.0


async def test_acknowledgements_count_the_messages_they_release() -> None:
    """Per message, as Pulsar's ``messageAckRate``: a batch counts each of its messages, a
    cumulative acknowledgement everything it covers, an acknowledgement of what the
    consumer does not hold (acknowledged already, or never sent to it) nothing."""
    topic = await loaded()
    clock = Clock()
    updates = StatsUpdates(lambda: [topic], clock)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(4):
        await publish(topic, producer, seq)
    await publish(topic, producer, 4, num_messages_in_batch=3)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "c")
    subscription = consumer.subscription
    subscription.on_flow(consumer, 100)
    await settle()
    positions = side.positions_of("c")
    subscription.on_ack(consumer, [positions[1], positions[1]], cumulative=False)
    assert consumer.msgs_acked == 1
    subscription.on_ack(consumer, [positions[-1]], cumulative=True)
    assert consumer.msgs_acked == 1 + 3 + 3  # the three singles left and the batch
    subscription.on_ack(consumer, [positions[-1]], cumulative=True)
    assert consumer.msgs_acked == 7
    clock.now += 2
    await updates.update()
    assert consumer.rates is not None and consumer.rates.rates[3] == 3.5


async def test_acknowledgements_without_a_consumer_count_for_the_one_that_held_them() -> None:
    """A transaction's acknowledgements applied at its commit name no consumer."""
    topic = await loaded()
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(3):
        await publish(topic, producer, seq)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "c", sub_type=SubscriptionType.SHARED)
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    topic.subscriptions["sub"].on_ack(None, side.positions_of("c")[:2], cumulative=False)
    assert consumer.msgs_acked == 2


async def test_entries_read_count_every_read_whatever_the_subscription_type() -> None:
    """New entries, and the entries read again to redeliver them: from the rewound cursor
    (Exclusive), one by one (Shared, Key_Shared)."""
    for sub_type in (SubscriptionType.EXCLUSIVE, SubscriptionType.SHARED, KEY_SHARED):
        topic = await loaded()
        producer = new_producer("p")
        topic.add_producer(producer)
        for seq in range(4):
            await publish(topic, producer, seq)
        consumer = await subscribe(topic, ConsumerSide(), "c", sub_type=sub_type)
        consumer.subscription.on_flow(consumer, 10)
        await settle()
        assert topic.entries_read == 4, sub_type
        consumer.subscription.on_redeliver(consumer, None)
        await settle()
        assert topic.entries_read == 8, sub_type


async def test_storage_rates_are_the_ledgers_writes_and_the_subscriptions_reads() -> None:
    topic = await loaded()
    clock = Clock()
    updates = StatsUpdates(lambda: [topic], clock, stored=lambda: [topic])
    await updates.update()
    assert topic.storage_rates is None  # an idle topic carries no meter
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(6):
        await publish(topic, producer, seq)
    consumer = await subscribe(topic, ConsumerSide(), "c")
    consumer.subscription.on_flow(consumer, 3)
    await settle()
    assert (topic.managed_ledger.entries_added, topic.entries_read) == (6, 3)
    clock.now += 3
    await updates.update()
    assert topic.storage_rates is not None
    assert topic.storage_rates.rates == (2.0, 1.0)
