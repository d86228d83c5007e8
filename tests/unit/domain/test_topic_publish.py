"""Topic.publish: every SEND ends in one outcome (stored, duplicate, unknown, failed),
with PIP-6 verdicts wired to the appends and to what a failed write really left."""

from __future__ import annotations

import asyncio

from dedup_broker.domain_base.outcomes import (
    DUPLICATE,
    PublishOutcome,
    PublishStatus,
)
from dedup_broker.errors import LedgerFencedError, StorageError
from dedup_broker.pip6.marks import producer_marks
from dedup_broker.storage.values import Position
from harness.domain_links import ProducerSide, new_producer, publish
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"


async def test_a_stored_message_has_its_position_and_counts() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    assert await publish(topic, producer, 0) == PublishOutcome.stored(Position(1, 0))
    assert await publish(topic, producer, 1) == PublishOutcome.stored(Position(1, 1))
    assert (topic.msgs_in, producer.msgs_in, producer.pending_sends) == (2, 2, 0)
    assert await topic.last_message_id() == (Position(1, 1), -1)


async def test_without_deduplication_a_resend_is_stored_again() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    await publish(topic, producer, 0)
    assert await publish(topic, producer, 0) == PublishOutcome.stored(Position(1, 1))
    assert topic.last_sequence_id("p") == -1


async def test_with_deduplication_a_stored_sequence_id_is_a_duplicate() -> None:
    topic = await MemoryBroker.configured(broker_deduplication_enabled=True).topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    assert await publish(topic, producer, 0) == PublishOutcome.stored(Position(1, 0))
    assert await publish(topic, producer, 0) is DUPLICATE
    assert topic.last_sequence_id("p") == 0
    # A batch counts up to its highest sequence id.
    batch = await publish(topic, producer, 1, num_messages_in_batch=3, highest_sequence_id=3)
    assert batch == PublishOutcome.stored(Position(1, 1))
    assert await publish(topic, producer, 2) is DUPLICATE
    assert topic.last_sequence_id("p") == 3


async def test_a_failed_append_is_a_retriable_failure_and_fails_what_follows() -> None:
    broker = MemoryBroker()
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    sends = [asyncio.ensure_future(publish(topic, producer, seq)) for seq in range(3)]
    await settle()
    pending = ledger.pending_appends
    pending[0].acknowledge()
    pending[1].fail(StorageError("broker not available"))
    outcomes = await asyncio.gather(*sends)
    assert outcomes[0] == PublishOutcome.stored(Position(1, 0))
    assert [o.status for o in outcomes[1:]] == [PublishStatus.FAILED] * 2
    assert str(outcomes[1].error) == "broker not available"
    assert isinstance(outcomes[2].error, LedgerFencedError)
    assert all(o.retriable for o in outcomes)
    assert producer.pending_sends == 0
    await ledger.wait_writable()
    ledger.hold_appends = False
    assert await publish(topic, producer, 1) == PublishOutcome.stored(Position(2, 0))


async def test_an_earlier_chunk_is_stored_once_and_the_last_completes_the_message() -> None:
    topic = await MemoryBroker.configured(broker_deduplication_enabled=True).topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    chunk = {"uuid": "p-5", "num_chunks_from_msg": 2, "total_chunk_msg_size": 14}
    assert await publish(topic, producer, 5, chunk_id=0, **chunk) == PublishOutcome.stored(
        Position(1, 0)
    )
    assert topic.last_sequence_id("p") == -1
    # Sent again: answered with where it is, not stored twice.
    assert await publish(topic, producer, 5, chunk_id=0, **chunk) == PublishOutcome.duplicate(
        Position(1, 0)
    )
    assert await publish(topic, producer, 5, chunk_id=1, **chunk) == PublishOutcome.stored(
        Position(1, 1)
    )
    assert topic.last_sequence_id("p") == 5
    assert await publish(topic, producer, 5, chunk_id=1, **chunk) is DUPLICATE
    assert await publish(topic, producer, 5, chunk_id=0, **chunk) is DUPLICATE


async def test_a_producer_name_is_held_by_one_live_producer() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    first = new_producer("p", 1)
    topic.add_producer(first)
    second = new_producer("p", 2)
    try:
        topic.add_producer(second)
    except Exception as exc:
        assert str(exc) == f"producer 'p' is already connected to topic {TOPIC}"
    else:
        raise AssertionError("a second producer named 'p' was accepted")
    topic.remove_producer(first)
    topic.add_producer(second)
    assert topic.producers == {"p": second}


async def test_unloading_tells_producers_to_go_after_their_writes_settle() -> None:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    topic = await broker.topic(TOPIC)
    side = ProducerSide()
    producer = new_producer("p", side=side)
    topic.add_producer(producer)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    in_flight = asyncio.ensure_future(publish(topic, producer, 7))
    await settle()
    closing = asyncio.ensure_future(topic.close())
    await settle()
    assert side.closed == ["p"]
    assert not closing.done()  # the write in flight settles first
    ledger.acknowledge_appends()
    await closing
    assert await in_flight == PublishOutcome.stored(Position(1, 0))
    assert ledger.state == "Closed"
    assert producer_marks(ledger.stored_cursor("pulsar.dedup").properties) == {"p": 7}
    reloaded = await (await broker.restarted(graceful=False)).topic(TOPIC)
    assert reloaded.last_sequence_id("p") == 7
