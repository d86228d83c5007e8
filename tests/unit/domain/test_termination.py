"""A terminated topic: each consumer hears REACHED_END_OF_TOPIC once, when it has read
everything, and a consumer that joins later hears it too."""

from __future__ import annotations

from dedup_broker.domain.topic import Topic
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/ended"


async def terminated_with(entries: int) -> Topic:
    topic = await MemoryBroker.configured().topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(entries):
        await publish(topic, producer, seq)
    await topic.terminate()
    return topic


async def test_each_consumer_hears_the_end_once_after_reading_everything() -> None:
    topic = await terminated_with(3)
    side = ConsumerSide()
    first = await subscribe(topic, side, "first")
    await settle()
    assert side.ended == []  # three entries still to read
    first.subscription.on_flow(first, 10)
    await settle()
    assert side.positions_of("first") == [Position(1, i) for i in range(3)]
    assert side.ended == ["first"]
    first.subscription.on_flow(first, 10)  # more rounds: not told again
    await settle()
    assert side.ended == ["first"]
    first.subscription.consumer_left(first)
    later = await subscribe(topic, side, "later")
    later.subscription.on_flow(later, 10)
    await settle()
    assert side.ended == ["first", "later"]
