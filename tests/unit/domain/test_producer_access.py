"""Producer access modes on a topic: who is admitted, the waiting queue, the epoch."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.domain.producer_access import (
    ProducerBusyError,
    ProducerClosedError,
    ProducerFencedError,
)
from dedup_broker.domain_base.producer import Producer, ProducerAccessMode
from harness.domain_links import ProducerSide
from harness.memory_broker import MemoryBroker

TOPIC = "persistent://public/default/orders"
Mode = ProducerAccessMode


def _producer(
    name: str, mode: Mode, epoch: int | None = None, side: ProducerSide | None = None
) -> Producer:
    return Producer(side or ProducerSide(), 1, name, True, access_mode=mode, topic_epoch=epoch)


async def test_exclusive_access_grows_the_epoch_and_refuses_others() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    first = _producer("a", Mode.EXCLUSIVE)
    assert await topic.attach_producer(first) == 0
    with pytest.raises(ProducerBusyError):
        await topic.attach_producer(_producer("s", Mode.SHARED))
    with pytest.raises(ProducerFencedError):
        await topic.attach_producer(_producer("b", Mode.EXCLUSIVE))
    topic.remove_producer(first)
    assert await topic.attach_producer(_producer("b", Mode.EXCLUSIVE)) == 1
    assert topic.stats()["topicEpoch"] == 1


async def test_fencing_closes_the_holder_which_cannot_come_back_with_its_old_epoch() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    side = ProducerSide()
    old = _producer("old", Mode.EXCLUSIVE, side=side)
    assert await topic.attach_producer(old) == 0
    assert await topic.attach_producer(_producer("new", Mode.EXCLUSIVE_WITH_FENCING)) == 1
    assert side.closed == ["old"] and old.closed
    with pytest.raises(ProducerFencedError):
        await topic.attach_producer(_producer("old", Mode.EXCLUSIVE, epoch=0))

    # The epoch is stored: a restarted broker still knows it.
    restarted = await broker.restarted()
    topic = await restarted.topic(TOPIC)
    assert topic.access.epoch == 1
    with pytest.raises(ProducerFencedError):
        await topic.attach_producer(_producer("old", Mode.EXCLUSIVE, epoch=0))


async def test_waiting_producers_take_the_topic_in_arrival_order() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    shared = _producer("s", Mode.SHARED)
    topic.add_producer(shared)
    queued: list[str] = []
    first = asyncio.ensure_future(
        topic.attach_producer(_producer("w1", Mode.WAIT_FOR_EXCLUSIVE), lambda: queued.append("w1"))
    )
    w2 = _producer("w2", Mode.WAIT_FOR_EXCLUSIVE)
    second = asyncio.ensure_future(topic.attach_producer(w2, lambda: queued.append("w2")))
    third = asyncio.ensure_future(
        topic.attach_producer(_producer("w3", Mode.WAIT_FOR_EXCLUSIVE), lambda: queued.append("w3"))
    )
    await asyncio.sleep(0)
    assert queued == ["w1", "w2", "w3"] and not first.done()

    topic.remove_producer(shared)
    assert await first == 0
    assert set(topic.producers) == {"w1"}
    topic.remove_producer(w2)  # gave up while waiting
    with pytest.raises(ProducerClosedError):
        await second
    topic.remove_producer(topic.producers["w1"])
    assert await third == 1
    assert set(topic.producers) == {"w3"}


async def test_fencing_fails_the_waiting_producers() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    await topic.attach_producer(_producer("holder", Mode.EXCLUSIVE))
    waiting = asyncio.ensure_future(topic.attach_producer(_producer("w", Mode.WAIT_FOR_EXCLUSIVE)))
    await asyncio.sleep(0)
    assert await topic.attach_producer(_producer("f", Mode.EXCLUSIVE_WITH_FENCING)) == 1
    with pytest.raises(ProducerFencedError):
        await waiting
    assert set(topic.producers) == {"f"}
