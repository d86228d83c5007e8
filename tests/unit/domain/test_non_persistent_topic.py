"""Non-persistent topics: each message goes once to every subscription's consumer that can
take it now, or is dropped and counted; nothing is stored."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client import Counter

from dedup_broker.domain.consumer import Consumer, Delivery, SubscriptionType
from dedup_broker.domain.key_hash import KeySharedSettings
from dedup_broker.domain.non_persistent.metrics import DropReason
from dedup_broker.domain.non_persistent.topic import (
    MESSAGE_ID,
    NO_MESSAGE,
    NonPersistentTopic,
    NotOnNonPersistentError,
    RateMeter,
)
from dedup_broker.domain.registry import PartitionedTopicError
from dedup_broker.domain_base.names import TopicDomain, TopicName
from dedup_broker.domain_base.outcomes import PublishOutcome
from dedup_broker.errors import InvalidTopicNameError, TopicNotFoundError
from dedup_broker.protocol.framing import parse_metadata_only
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker

TOPIC = "non-persistent://public/default/ticks"
SHARED, FAILOVER = SubscriptionType.SHARED, SubscriptionType.FAILOVER
KEY_SHARED = SubscriptionType.KEY_SHARED


def name(text: str) -> TopicName:
    return TopicName.parse(text)


def counted(counter: Counter, **labels: str) -> float:
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels == labels:
                return sample.value
    return 0.0


def delivered(side: ConsumerSide) -> list[tuple[str, int]]:
    """(consumer, sequence id) of what was delivered since the last call."""
    return [(who, seq) for who, seq in side.sequences]


class RecordingSide(ConsumerSide):
    """Keeps each delivered message's sequence id (every id is ``0:0``)."""

    def __init__(self) -> None:
        super().__init__()
        self.sequences: list[tuple[str, int]] = []

    def deliver(self, consumer: Consumer, deliveries: Sequence[Delivery]) -> None:
        super().deliver(consumer, deliveries)
        for d in deliveries:
            self.sequences.append((consumer.name, parse_metadata_only(d.entry.data).sequence_id))


async def np_topic(broker: MemoryBroker | None = None) -> NonPersistentTopic:
    broker = broker or MemoryBroker()
    topic = await broker.broker.topic_registry.serve(name(TOPIC))
    assert isinstance(topic, NonPersistentTopic)
    return topic


def test_names_of_both_domains_parse() -> None:
    parsed = name("non-persistent://t/ns/a")
    assert (parsed.domain, parsed.is_persistent, str(parsed)) == (
        TopicDomain.NON_PERSISTENT,
        False,
        "non-persistent://t/ns/a",
    )
    assert str(parsed.partition(2)) == "non-persistent://t/ns/a-partition-2"
    assert name("t/ns/a").domain is TopicDomain.PERSISTENT
    with pytest.raises(InvalidTopicNameError, match=r"^unknown topic domain 'volatile'"):
        name("volatile://t/ns/a")


async def test_publish_without_subscription_is_received_and_dropped() -> None:
    broker = MemoryBroker()
    topic = await np_topic(broker)
    producer = new_producer("p")
    topic.add_producer(producer)
    outcome = await publish(topic, producer, 0)  # type: ignore[arg-type]
    assert outcome == PublishOutcome.stored(MESSAGE_ID)
    assert (topic.msgs_in, topic.unrouted.total) == (1, 1)
    metrics = broker.broker.metrics.non_persistent
    assert counted(metrics.msgs_dropped, reason=DropReason.NO_SUBSCRIPTION.value) == 1
    assert counted(metrics.msgs_in) == 1
    assert broker.storage.open_managed_ledgers == {}
    assert broker.broker.storage.list_managed_ledgers() == []


async def test_a_ready_consumer_gets_every_message_in_order_then_drops_without_permits() -> None:
    topic = await np_topic()
    side = RecordingSide()
    consumer = await subscribe(topic, side, "a")  # type: ignore[arg-type]
    consumer.subscription.on_flow(consumer, 3)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(5):
        await publish(topic, producer, seq)  # type: ignore[arg-type]
    assert delivered(side) == [("a", 0), ("a", 1), ("a", 2)]
    assert [position for _, position, _ in side.delivered] == [MESSAGE_ID] * 3
    assert consumer.permits == 0 and consumer.pending == {}
    stats = topic.stats()["subscriptions"]["sub"]  # type: ignore[index]
    assert (stats["msgOutCounter"], stats["msgDropCounter"], stats["isDurable"]) == (3, 2, False)


async def test_every_subscription_gets_every_message() -> None:
    topic = await np_topic()
    side = RecordingSide()
    for consumer_name, subscription in (("a", "one"), ("b", "two")):
        consumer = await subscribe(topic, side, consumer_name, subscription)  # type: ignore[arg-type]
        consumer.subscription.on_flow(consumer, 10)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(3):
        await publish(topic, producer, seq)  # type: ignore[arg-type]
    assert delivered(side) == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]


async def published_to_two(
    sub_type: SubscriptionType, permits: tuple[int, int], messages: int
) -> RecordingSide:
    """Consumers ``a`` and ``b`` of one subscription with these permits, then messages."""
    topic = await np_topic()
    side = RecordingSide()
    for consumer_name, given in zip(("a", "b"), permits, strict=True):
        consumer = await subscribe(topic, side, consumer_name, sub_type=sub_type)  # type: ignore[arg-type]
        consumer.subscription.on_flow(consumer, given)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(messages):
        await publish(topic, producer, seq)  # type: ignore[arg-type]
    return side


async def test_shared_takes_turns_among_consumers_with_permits() -> None:
    side = await published_to_two(SHARED, (1, 10), 4)
    assert delivered(side) == [("a", 0), ("b", 1), ("b", 2), ("b", 3)]


async def test_failover_sends_to_the_active_consumer_only() -> None:
    side = await published_to_two(FAILOVER, (5, 5), 1)
    # b owns the topic name's point on the hash ring (Pulsar's pick, non-partitioned).
    assert delivered(side) == [("b", 0)]
    assert side.active_changes == [("a", True), ("a", False), ("b", True)]


async def test_key_shared_keeps_a_key_on_one_consumer() -> None:
    topic = await np_topic()
    side = RecordingSide()
    for consumer_name in ("a", "b"):
        consumer = await subscribe(
            topic, side, consumer_name, sub_type=KEY_SHARED, key_shared=KeySharedSettings()
        )  # type: ignore[arg-type]
        consumer.subscription.on_flow(consumer, 100)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(20):
        await publish(topic, producer, seq, partition_key=f"k{seq % 4}")  # type: ignore[arg-type]
    owners: dict[int, set[str]] = {}
    for who, seq in delivered(side):
        owners.setdefault(seq % 4, set()).add(who)
    assert sorted(owners) == [0, 1, 2, 3]
    assert all(len(who) == 1 for who in owners.values())


async def test_batches_count_their_messages() -> None:
    """As in Pulsar, a consumer with any permit left takes a whole batch."""
    topic = await np_topic()
    side = RecordingSide()
    consumer = await subscribe(topic, side, "a")  # type: ignore[arg-type]
    consumer.subscription.on_flow(consumer, 2)
    producer = new_producer("p")
    topic.add_producer(producer)
    await publish(topic, producer, 0, num_messages_in_batch=3)  # type: ignore[arg-type]
    await publish(topic, producer, 3, num_messages_in_batch=3)  # type: ignore[arg-type]
    assert delivered(side) == [("a", 0)]
    assert consumer.permits == -1
    assert topic.msgs_in == 6
    assert topic.subscriptions["sub"].drops.total == 3


async def test_the_subscription_goes_with_its_last_consumer() -> None:
    topic = await np_topic()
    side = RecordingSide()
    a = await subscribe(topic, side, "a", sub_type=SHARED)  # type: ignore[arg-type]
    b = await subscribe(topic, side, "b", sub_type=SHARED)  # type: ignore[arg-type]
    topic.consumer_closed(a)
    assert list(topic.subscriptions) == ["sub"]
    topic.consumer_closed(b)
    assert topic.subscriptions == {}
    assert topic.idle_for() >= 0.0
    with pytest.raises(NotOnNonPersistentError, match=r"^seek is not supported"):
        await b.subscription.reset_cursor(MESSAGE_ID)
    assert await topic.last_message_id() == (NO_MESSAGE, -1)


async def test_the_broker_serves_lists_and_forgets_live_topics() -> None:
    broker = MemoryBroker()
    domain = broker.broker
    topic = await np_topic(broker)
    assert domain.topic_registry.non_persistent_topics_of_namespace("public/default") == [TOPIC]
    assert domain.namespaces.topics_of_namespace("public/default") == []
    assert domain.topic_registry.topic_exists(name(TOPIC))
    with pytest.raises(InvalidTopicNameError, match=r"is not a persistent topic$"):
        await domain.topic_registry.get_topic(name(TOPIC))
    assert await domain.topic_registry.drop_idle_non_persistent(3600.0) == []
    assert await domain.topic_registry.drop_idle_non_persistent(0.0) == [TOPIC]
    assert topic.closed and domain.topic_registry.non_persistent == {}


async def test_creation_follows_auto_creation_and_partitions() -> None:
    broker = MemoryBroker.configured(allow_auto_topic_creation=False)
    domain = broker.broker
    with pytest.raises(TopicNotFoundError, match=r"does not exist$"):
        await domain.topic_registry.serve(name(TOPIC))
    await domain.partitioned_topics.create_partitioned_topic(name(TOPIC), 2)
    assert domain.partitioned_topics.list_partitioned_topics(
        "public/default", TopicDomain.NON_PERSISTENT
    ) == [TOPIC]
    assert domain.partitioned_topics.list_partitioned_topics("public/default") == []
    with pytest.raises(PartitionedTopicError):
        await domain.topic_registry.serve(name(TOPIC))
    partition = await domain.topic_registry.serve(name(f"{TOPIC}-partition-1"))
    assert isinstance(partition, NonPersistentTopic)
    with pytest.raises(TopicNotFoundError, match=r"has 2 partitions"):
        await domain.topic_registry.serve(name(f"{TOPIC}-partition-2"))
    await domain.topic_registry.delete_partitioned_topic(name(TOPIC))
    assert (
        domain.topic_registry.non_persistent == {}
        and domain.partitioned_topics.partitions_of(name(TOPIC)) == 0
    )


def test_drop_rate_covers_the_last_minute() -> None:
    meter = RateMeter()
    meter.record(30, now=100.0)
    meter.record(30, now=130.5)
    assert meter.rate(now=131.0) == 1.0
    assert meter.rate(now=175.0) == 0.5
    assert meter.total == 60
