"""A terminated topic: each consumer hears REACHED_END_OF_TOPIC once, when its
subscription acknowledged everything (as Pulsar tells it), and a consumer that joins
later hears it too; its producers are closed, and a SEND met while the topic is being
terminated waits for that close instead of being answered with an error."""

from __future__ import annotations

import asyncio

from dedup_broker.domain.termination import TopicTerminatedError
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.outcomes import PublishStatus
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, ProducerSide, new_producer, publish, subscribe
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


async def test_each_consumer_hears_the_end_once_everything_is_acknowledged() -> None:
    topic = await terminated_with(3)
    side = ConsumerSide()
    first = await subscribe(topic, side, "first")
    await settle()
    assert side.ended == []  # three entries still to read
    first.subscription.on_flow(first, 10)
    await settle()
    read = side.positions_of("first")
    assert read == [Position(1, i) for i in range(3)]
    assert side.ended == []  # read, not acknowledged: Pulsar does not tell yet
    first.subscription.on_ack(first, read[:2], cumulative=False)
    await settle()
    assert side.ended == []
    first.subscription.on_ack(first, read[2:], cumulative=False)
    await settle()
    assert side.ended == ["first"]
    first.subscription.on_flow(first, 10)  # more rounds: not told again
    await settle()
    assert side.ended == ["first"]
    first.subscription.consumer_left(first)
    later = await subscribe(topic, side, "later")
    later.subscription.on_flow(later, 10)
    await settle()
    assert side.ended == ["first", "later"]


async def test_a_send_met_while_terminating_waits_for_its_producer_to_be_closed() -> None:
    """The append in flight is stored first; a SEND that comes meanwhile is not refused
    before the producer is closed (the client hears CLOSE_PRODUCER, then
    ``TopicTerminatedError`` when it comes back), and is never answered stored."""
    broker = MemoryBroker.configured()
    topic = await broker.topic(TOPIC)
    side = ProducerSide()
    producer = new_producer("p", side=side)
    topic.add_producer(producer)
    ledger = broker.storage.ledger(topic.managed_ledger.name)
    ledger.hold_appends = True
    in_flight = asyncio.ensure_future(publish(topic, producer, 0))
    await settle()
    terminating = asyncio.ensure_future(topic.terminate())
    await settle()
    met = asyncio.ensure_future(publish(topic, producer, 1))
    await settle()
    assert not met.done() and not terminating.done() and side.closed == []
    ledger.hold_appends = False
    for pending in ledger.pending_appends:
        pending.acknowledge()
    assert (await in_flight).status is PublishStatus.STORED
    assert await terminating == Position(1, 0)
    assert side.closed == ["p"] and producer.closed
    outcome = await met
    assert outcome.status is PublishStatus.FAILED
    assert isinstance(outcome.error, TopicTerminatedError)
    late = await publish(topic, producer, 2)  # once closed: refused at once
    assert late.status is PublishStatus.FAILED
    assert isinstance(late.error, TopicTerminatedError)
