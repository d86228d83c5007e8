"""A SEND whose earlier copy is still being written waits for it (no send error, which
would make the client drop its connection), and the producer's later SENDs wait behind
it: each ends in its real outcome, stored once, in order."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.domain import send_order
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.outcomes import (
    DUPLICATE,
    UNKNOWN,
    EarlierCopyInFlightError,
    EarlierSendFailedError,
    PublishOutcome,
    PublishStatus,
)
from dedup_broker.domain_base.producer import Producer
from dedup_broker.errors import StorageError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.values import Position
from harness.client_commands import message_block
from harness.domain_links import new_producer, publish
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/orders"


async def _topic_with_first_copy_in_flight() -> tuple[
    MemoryBroker, Topic, Producer, asyncio.Future[PublishOutcome]
]:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    broker.ledger(TOPIC).hold_appends = True
    first = asyncio.ensure_future(publish(topic, producer, 0))
    await settle()
    return broker, topic, producer, first


async def test_a_resend_while_the_first_copy_is_in_flight_is_unknown_to_deduplication() -> None:
    broker, topic, producer, first = await _topic_with_first_copy_in_flight()
    entry = message_block(producer.name, 0)
    send = pb.CommandSend(producer_id=producer.producer_id, sequence_id=0)
    resend = await topic.append_checked(producer, send, entry, parse_metadata_only(entry))
    assert resend is UNKNOWN
    assert isinstance(resend.error, EarlierCopyInFlightError) and resend.retriable
    broker.ledger(TOPIC).acknowledge_appends()
    assert await first == PublishOutcome.stored(Position(1, 0))


async def test_a_resend_of_a_copy_that_lands_is_a_duplicate_and_the_next_send_follows() -> None:
    broker, topic, producer, first = await _topic_with_first_copy_in_flight()
    ledger = broker.ledger(TOPIC)
    resend = asyncio.ensure_future(publish(topic, producer, 0))
    following = asyncio.ensure_future(publish(topic, producer, 1))
    await asyncio.sleep(4 * send_order.LOOK_AGAIN_S)
    assert not resend.done() and not following.done()
    assert len(ledger.pending_appends) == 1  # the next SEND is not written before it
    ledger.hold_appends = False
    ledger.acknowledge_appends()
    assert await first == PublishOutcome.stored(Position(1, 0))
    assert await resend is DUPLICATE
    assert await following == PublishOutcome.stored(Position(1, 1))
    assert producer.turn is None
    assert topic.managed_ledger.last_confirmed == Position(1, 1)


async def test_a_resend_of_a_copy_that_was_lost_is_written_once() -> None:
    broker, topic, producer, first = await _topic_with_first_copy_in_flight()
    ledger = broker.ledger(TOPIC)
    resend = asyncio.ensure_future(publish(topic, producer, 0))
    following = asyncio.ensure_future(publish(topic, producer, 1))
    await settle()
    ledger.hold_appends = False
    ledger.pending_appends[0].fail(StorageError("broker not available"))
    assert (await first).status is PublishStatus.FAILED
    assert await resend == PublishOutcome.stored(Position(2, 0))
    assert await following == PublishOutcome.stored(Position(2, 1))
    assert topic.last_sequence_id("p") == 1


async def test_a_copy_not_settled_in_time_fails_the_resend_and_what_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(send_order, "WAIT_LIMIT_S", 0.2)
    broker, topic, producer, first = await _topic_with_first_copy_in_flight()
    ledger = broker.ledger(TOPIC)
    resent = asyncio.ensure_future(publish(topic, producer, 0))
    following = asyncio.ensure_future(publish(topic, producer, 1))
    resend = await resent
    assert resend.status is PublishStatus.UNKNOWN
    assert isinstance(resend.error, EarlierCopyInFlightError) and resend.retriable
    behind = await following
    assert behind.status is PublishStatus.FAILED
    assert isinstance(behind.error, EarlierSendFailedError) and behind.retriable
    assert len(ledger.pending_appends) == 1
    ledger.acknowledge_appends()
    assert await first == PublishOutcome.stored(Position(1, 0))


async def test_after_a_failed_write_a_waiting_send_is_not_written_and_resends_are_exact() -> None:
    """The client resends from the failed SEND on; a later SEND stored first would make
    deduplication take the failed one's resend for a duplicate. The resends find what
    really landed."""
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    topic = await broker.topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    sends = [asyncio.ensure_future(publish(topic, producer, seq)) for seq in (0, 1)]
    await settle()
    ledger.read_gate = asyncio.Event()  # learning what landed takes a while
    ledger.pending_appends[0].fail(landed=True)  # Kafka stored 0 (its report failed), not 1
    assert [o.status for o in await asyncio.gather(*sends)] == [PublishStatus.FAILED] * 2
    later = asyncio.ensure_future(publish(topic, producer, 2))  # sent before it heard
    await settle()
    ledger.hold_appends = False
    ledger.read_gate.set()
    outcome = await later
    assert outcome.status is PublishStatus.FAILED
    assert isinstance(outcome.error, EarlierSendFailedError) and outcome.retriable
    topic.remove_producer(producer)  # the client drops the connection, creates the
    again = new_producer("p")  # producer again and resends from the failed SEND on
    topic.add_producer(again)
    assert await publish(topic, again, 0) is DUPLICATE
    assert topic.last_sequence_id("p") == 0
    assert await publish(topic, again, 1) == PublishOutcome.stored(Position(2, 0))
    assert await publish(topic, again, 2) == PublishOutcome.stored(Position(2, 1))
