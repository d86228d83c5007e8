"""What a producer's client hears: PRODUCER_SUCCESS (with the last persisted sequence id),
one receipt or SEND_ERROR per SEND, in SEND order whatever order the outcomes settle in,
and CLOSE_PRODUCER when its topic goes."""

from __future__ import annotations

import asyncio
from typing import Any

from dedup_broker.domain import send_order
from dedup_broker.domain_base.names import TopicName
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch
from dedup_broker.protocol.framing import Frame
from harness import client_commands as client
from harness.client_commands import message_block
from harness.memory_broker import MemoryBroker, WireClient, settle

TOPIC = "persistent://public/default/orders"


def replies(*expected: pb.BaseCommand) -> list[Frame]:
    return [Frame(command, None) for command in expected]


def receipt(sequence_id: int, ledger_id: int, entry_id: int, **more: int) -> pb.BaseCommand:
    return commands.send_receipt(1, sequence_id, ledger_id, entry_id, **more)


def send_error(sequence_id: int, message: str) -> pb.BaseCommand:
    return commands.send_error(1, sequence_id, pb.PersistenceError, message)


async def producer_on(broker: MemoryBroker, name: str = "p") -> WireClient:
    connection = await broker.client()
    frames = await connection.exchange(client.producer(TOPIC, 1, 10, name))
    assert frames == replies(commands.producer_success(10, name))
    return connection


def send(connection: WireClient, sequence_id: int, **fields: Any) -> None:
    connection.send(client.send(1, sequence_id), message_block("p", sequence_id, **fields))


async def test_stored_messages_get_receipts_with_their_positions() -> None:
    connection = await producer_on(MemoryBroker())
    send(connection, 0)
    send(connection, 1)
    await settle()
    assert connection.received() == replies(receipt(0, 1, 0), receipt(1, 1, 1))


async def test_a_duplicate_gets_a_receipt_without_a_position() -> None:
    connection = await producer_on(MemoryBroker.configured(broker_deduplication_enabled=True))
    send(connection, 0)
    await settle()
    send(connection, 0)
    await settle()
    assert connection.received() == replies(receipt(0, 1, 0), receipt(0, -1, -1))


async def test_a_resend_of_a_message_in_flight_waits_and_is_answered_as_a_duplicate() -> None:
    """No send error (the client would drop the connection): the resend's answer waits
    for the original's write."""
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer_on(broker)
    broker.ledger(TOPIC).hold_appends = True
    send(connection, 0)
    send(connection, 0)
    send(connection, 1)
    await asyncio.sleep(4 * send_order.LOOK_AGAIN_S)
    assert connection.received() == []
    broker.ledger(TOPIC).hold_appends = False
    broker.ledger(TOPIC).acknowledge_appends()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert connection.received() == replies(receipt(0, 1, 0), receipt(0, -1, -1), receipt(1, 1, 1))


async def test_receipts_leave_in_send_order_when_kafka_acknowledges_out_of_order() -> None:
    broker = MemoryBroker()
    connection = await producer_on(broker)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    for seq in range(3):
        send(connection, seq)
    await settle()
    pending = ledger.pending_appends
    pending[2].acknowledge()
    pending[1].acknowledge()
    await settle()
    assert connection.received() == []
    pending[0].acknowledge()
    await settle()
    assert connection.received() == replies(receipt(0, 1, 0), receipt(1, 1, 1), receipt(2, 1, 2))


async def test_a_failed_write_in_the_middle_fails_it_and_what_follows_in_order() -> None:
    broker = MemoryBroker()
    connection = await producer_on(broker)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    for seq in range(3):
        send(connection, seq)
    await settle()
    pending = ledger.pending_appends
    pending[0].acknowledge()
    pending[1].fail()
    await settle()
    name = broker.ledger(TOPIC).name
    failure = f"append to {name}: Kafka did not acknowledge the write"
    assert connection.received() == replies(
        receipt(0, 1, 0),
        send_error(1, failure),
        send_error(2, f"managed ledger {name} fenced after a failed write: {failure}"),
    )
    # The client drops the connection on a SEND_ERROR, as the official clients do, and
    # resends on a new one once the ledger recovered.
    connection.disconnect()
    ledger.hold_appends = False
    again = await producer_on(broker)
    send(again, 1)
    await settle()
    assert again.received() == replies(receipt(1, 2, 0))


async def test_after_a_failed_send_none_written_behind_it_is_stored_before_it() -> None:
    """SENDs the client wrote before it heard of a failure are not stored ahead of the
    failed one, even once the topic takes writes again: stored first, they would also
    make deduplication answer the failed ones' resends as duplicates (acknowledged, never
    stored; the long-run checker lost 932 messages so after a Kafka restart)."""
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer_on(broker)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    send(connection, 0)
    send(connection, 1)
    await settle()
    ledger.pending_appends[0].fail()
    await settle()  # both fail; the ledger recovers and deduplication learns nothing landed
    ledger.hold_appends = False
    send(connection, 2)  # written before the client read the SEND_ERRORs
    await settle()
    assert [frame.command.type for frame in connection.received()] == [
        pb.BaseCommand.SEND_ERROR
    ] * 3
    connection.disconnect()
    again = await producer_on(broker)
    for seq in range(3):
        send(again, seq)
    await settle()
    assert again.received() == replies(receipt(0, 2, 0), receipt(1, 2, 1), receipt(2, 2, 2))


async def test_a_refused_send_waits_behind_a_write_in_flight() -> None:
    broker = MemoryBroker()
    connection = await producer_on(broker)
    broker.ledger(TOPIC).hold_appends = True
    send(connection, 0)
    corrupted = bytearray(message_block("p", 1))
    corrupted[-1] ^= 0xFF
    connection.send(client.send(1, 1), bytes(corrupted))
    await settle()
    assert connection.received() == []
    broker.ledger(TOPIC).acknowledge_appends()
    await settle()
    assert connection.received() == replies(
        receipt(0, 1, 0),
        commands.send_error(
            1, 1, pb.ChecksumError, "message checksum (CRC32C) does not match its content"
        ),
    )


async def test_a_batch_is_answered_with_its_highest_sequence_id() -> None:
    connection = await producer_on(MemoryBroker.configured(broker_deduplication_enabled=True))
    block = message_block("p", 0, num_messages_in_batch=3, highest_sequence_id=2)
    connection.send(client.send(1, 0, num_messages=3, highest_sequence_id=2), block)
    await settle()
    again = message_block("p", 1, num_messages_in_batch=2, highest_sequence_id=2)
    connection.send(client.send(1, 1, num_messages=2, highest_sequence_id=2), again)
    await settle()
    assert connection.received() == replies(
        receipt(0, 1, 0, highest_sequence_id=2), receipt(1, -1, -1, highest_sequence_id=2)
    )


async def test_after_a_graceful_restart_the_producer_learns_its_last_sequence_id() -> None:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer_on(broker)
    send(connection, 0)
    singles = [(pb.SingleMessageMetadata(sequence_id=seq), b"m") for seq in (1, 2, 3)]
    # A batch as C++-based clients send it: the highest id only in its messages.
    connection.send(
        client.send(1, 1, num_messages=3),
        message_block("p", 1, payload=build_batch(singles), num_messages_in_batch=3),
    )
    await settle()
    restarted = await broker.restarted()
    assert connection.received()[-1] == Frame(commands.close_producer(1), None)
    again = await restarted.client()
    frames = await again.exchange(client.producer(TOPIC, 1, 11, "p"))
    assert frames == replies(commands.producer_success(11, "p", last_sequence_id=3))


async def test_after_a_crash_the_log_tells_the_last_sequence_id_of_completed_chunks() -> None:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer_on(broker)
    chunks = {"num_chunks_from_msg": 2, "total_chunk_msg_size": 14}
    send(connection, 4, uuid="p-4", chunk_id=0, **chunks)
    send(connection, 4, uuid="p-4", chunk_id=1, **chunks)
    send(connection, 5, uuid="p-5", chunk_id=0, **chunks)  # its last chunk never came
    await settle()
    assert len(connection.received()) == 3
    restarted = await broker.restarted(graceful=False)
    again = await restarted.client()
    frames = await again.exchange(client.producer(TOPIC, 1, 11, "p"))
    assert frames == replies(commands.producer_success(11, "p", last_sequence_id=4))


async def test_a_producer_name_in_use_is_refused() -> None:
    broker = MemoryBroker()
    await producer_on(broker)
    other = await broker.client()
    frames = await other.exchange(client.producer(TOPIC, 1, 12, "p"))
    assert frames == replies(
        commands.error(12, pb.ProducerBusy, f"producer 'p' is already connected to topic {TOPIC}")
    )


async def test_a_broker_named_producer_and_a_closed_one() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    (frame,) = await connection.exchange(client.producer(TOPIC, 1, 10))
    name = frame.command.producer_success.producer_name
    assert name.startswith("standalone-")
    assert broker.broker.topics[TOPIC].producers.keys() == {name}
    frames = await connection.exchange(client.close_producer(1, 11))
    assert frames == replies(commands.success(11))
    assert broker.broker.topics[TOPIC].producers == {}
    frames = await connection.exchange(client.send(1, 0), message_block(name, 0))
    assert frames == replies(send_error(0, "no producer with id 1 on this connection"))


async def test_reading_pauses_while_too_many_sends_await_their_outcome() -> None:
    broker = MemoryBroker.configured(max_pending_publish_requests_per_connection=4)
    connection = await producer_on(broker)
    broker.ledger(TOPIC).hold_appends = True
    for seq in range(4):
        send(connection, seq)
    await settle()
    assert not connection.transport.reading
    pending = broker.ledger(TOPIC).pending_appends
    pending[0].acknowledge()
    await settle()
    assert not connection.transport.reading
    pending[1].acknowledge()
    await settle()
    assert connection.transport.reading


async def test_an_unloaded_topic_closes_its_producers_and_consumers() -> None:
    broker = MemoryBroker()
    connection = await producer_on(broker)
    frames = await connection.exchange(client.subscribe(TOPIC, "sub", 7, 20))
    assert frames == replies(commands.success(20))
    await broker.broker.close()
    assert connection.received() == replies(commands.close_producer(1), commands.close_consumer(7))


async def test_sends_racing_a_broker_side_close_go_unanswered_until_the_producer_returns() -> None:
    """The client writes SENDs before it reads the CLOSE_PRODUCER: an error for them would
    make the C++-based clients drop the whole connection, every consumer on it included.
    They go unanswered (the client resends them where it reconnects), as with Pulsar."""
    broker = MemoryBroker()
    connection = await producer_on(broker)
    await connection.exchange(client.subscribe(TOPIC, "sub", 7, 20))
    await broker.broker.topic_registry.unload_topic(TopicName.parse(TOPIC))
    await settle()
    closes = [f.command.type for f in connection.received()]
    assert closes == [pb.BaseCommand.CLOSE_PRODUCER, pb.BaseCommand.CLOSE_CONSUMER]
    send(connection, 0)
    await settle()
    assert connection.received() == []
    assert not connection.transport.closed
    frames = await connection.exchange(client.producer(TOPIC, 1, 11, "p"))
    assert frames == replies(commands.producer_success(11, "p"))
    send(connection, 0)
    await settle()
    assert connection.received() == replies(receipt(0, 2, 0))  # the topic's new ledger
