"""An unload and the consumers' acknowledgements: what a consumer received before the
unload and acknowledges while it runs stays acknowledged."""

from __future__ import annotations

import asyncio

from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"


async def test_an_ack_sent_as_an_unload_begins_is_kept() -> None:
    broker = MemoryBroker.configured()
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq in range(5):
        await publish(topic, producer, seq)
    side = ConsumerSide()
    consumer = await subscribe(topic, side, "a")
    consumer.subscription.on_flow(consumer, 3)
    await settle()
    received = [position for _, position, _ in side.take()]
    assert len(received) == 3
    closing = asyncio.ensure_future(topic.close())
    await asyncio.sleep(0.02)
    # The unload has begun: nothing more is sent, and the consumer is still there for
    # the acknowledgement its client grouped before sending it.
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    assert side.take() == []
    assert side.closed == []
    consumer.subscription.on_ack(consumer, [received[-1]], cumulative=True)
    await closing
    assert side.closed == ["a"]
    again = await (await broker.restarted()).topic(TOPIC)
    resumed = ConsumerSide()
    consumer = await subscribe(again, resumed, "b")
    consumer.subscription.on_flow(consumer, 10)
    await settle()
    assert [p.entry_id for _, p, _ in resumed.take()] == [3, 4]
