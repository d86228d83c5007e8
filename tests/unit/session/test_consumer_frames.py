"""What a consumer's client hears: SUBSCRIBE answers, MESSAGE frames carrying the stored
bytes (with their redelivery count), ACK receipts, active-consumer changes, and
CLOSE_CONSUMER."""

from __future__ import annotations

from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame
from dedup_broker.storage.values import Position
from harness import client_commands as client
from harness.client_commands import message_block
from harness.memory_broker import MemoryBroker, WireClient, settle

TOPIC = "persistent://public/default/orders"
SHARED, FAILOVER = pb.CommandSubscribe.Shared, pb.CommandSubscribe.Failover
EARLIEST = pb.CommandSubscribe.Earliest


def at(entry: int) -> Position:
    return Position(1, entry)


def replies(*expected: pb.BaseCommand) -> list[Frame]:
    return [Frame(command, None) for command in expected]


def messages(consumer_id: int, *entries: tuple[int, int]) -> list[Frame]:
    """MESSAGE frames for (entry id, redelivery count), carrying what was published."""
    return [
        Frame(commands.message(consumer_id, 1, entry, redelivery_count=count), BLOCKS[entry])
        for entry, count in entries
    ]


BLOCKS = [message_block("p", seq, payload=b"order-%d" % seq) for seq in range(4)]


async def broker_with_messages(count: int = 3, **settings: object) -> MemoryBroker:
    broker = MemoryBroker.configured(**settings)
    producer = await broker.client()
    await producer.exchange(client.producer(TOPIC, 1, 1, "p"))
    for seq in range(count):
        producer.send(client.send(1, seq), BLOCKS[seq])
    await settle()
    assert len(producer.received()) == count
    return broker


async def consumer_on(
    broker: MemoryBroker,
    consumer_id: int,
    sub_type: pb.CommandSubscribe.SubType = SHARED,
    name: str | None = None,
) -> WireClient:
    connection = await broker.client()
    request = client.subscribe(
        TOPIC, "sub", consumer_id, 100 + consumer_id, sub_type, EARLIEST, consumer_name=name
    )
    assert (await connection.exchange(request))[0] == Frame(
        commands.success(100 + consumer_id), None
    )
    return connection


async def test_flow_brings_the_stored_messages_as_published() -> None:
    broker = await broker_with_messages(3)
    connection = await consumer_on(broker, 7, pb.CommandSubscribe.Exclusive)
    assert await connection.exchange(client.flow(7, 2)) == messages(7, (0, 0), (1, 0))
    assert await connection.exchange(client.flow(7, 5)) == messages(7, (2, 0))


async def test_a_second_consumer_of_an_exclusive_subscription_is_refused() -> None:
    broker = await broker_with_messages(0)
    await consumer_on(broker, 7, pb.CommandSubscribe.Exclusive)
    other = await broker.client()
    frames = await other.exchange(client.subscribe(TOPIC, "sub", 8, 30))
    assert frames == replies(
        commands.error(30, pb.ConsumerBusy, "exclusive subscription 'sub' already has a consumer")
    )


def sticky(*ranges: tuple[int, int]) -> pb.KeySharedMeta:
    meta = pb.KeySharedMeta(keySharedMode=pb.STICKY)
    for start, end in ranges:
        meta.hashRanges.add(start=start, end=end)
    return meta


async def test_a_sticky_key_shared_consumer_overlapping_another_is_refused() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    key_shared = pb.CommandSubscribe.Key_Shared
    first = client.subscribe(TOPIC, "sub", 7, 30, key_shared, key_shared=sticky((0, 100)))
    assert await connection.exchange(first) == replies(commands.success(30))
    second = client.subscribe(
        TOPIC, "sub", 8, 31, key_shared, consumer_name="b", key_shared=sticky((101, 200), (50, 60))
    )
    assert await connection.exchange(second) == replies(
        commands.error(
            31,
            pb.ConsumerAssignError,
            "Range conflict with consumer consumer-7: [50, 60] overlaps [0, 100]",
        )
    )
    third = client.subscribe(TOPIC, "sub", 9, 32, key_shared, key_shared=sticky((101, 200)))
    assert await connection.exchange(third) == replies(commands.success(32))


async def test_a_nack_redelivers_with_a_growing_redelivery_count() -> None:
    broker = await broker_with_messages(2)
    connection = await consumer_on(broker, 7)
    assert await connection.exchange(client.flow(7, 10)) == messages(7, (0, 0), (1, 0))
    nack = client.redeliver_unacknowledged(7, [at(1)])
    assert await connection.exchange(nack) == messages(7, (1, 1))
    assert await connection.exchange(nack) == messages(7, (1, 2))
    everything = client.redeliver_unacknowledged(7)
    assert await connection.exchange(everything) == messages(7, (0, 1), (1, 3))


async def test_messages_of_a_lost_connection_go_to_another_consumer() -> None:
    broker = await broker_with_messages(3)
    first = await consumer_on(broker, 7)
    second = await consumer_on(broker, 8)
    assert await first.exchange(client.flow(7, 3)) == messages(7, (0, 0), (1, 0), (2, 0))
    await first.exchange(client.ack(7, [at(1)]))
    first.disconnect()
    assert await second.exchange(client.flow(8, 10)) == messages(8, (0, 1), (2, 1))


async def test_acks_move_the_cursor_and_survive_a_restart() -> None:
    broker = await broker_with_messages(4)
    connection = await consumer_on(broker, 7)
    await connection.exchange(client.flow(7, 4))
    ack = client.ack(7, [at(1)], cumulative=True, request_id=50)
    assert await connection.exchange(ack) == replies(commands.ack_response(7, 50))
    assert await connection.exchange(client.ack(7, [at(3)])) == []
    cursor = broker.broker.topics[TOPIC].subscriptions["sub"].cursor
    assert cursor.mark_delete_position == at(1)
    assert cursor.individually_deleted_ranges() == [(at(3), at(3))]

    restarted = await broker.restarted()
    assert connection.received() == replies(commands.close_consumer(7))
    again = await consumer_on(restarted, 9)
    assert await again.exchange(client.flow(9, 10)) == messages(9, (2, 0))


async def test_a_batch_acked_in_part_moves_a_cumulative_ack_to_the_entry_before() -> None:
    broker = await broker_with_messages(3)
    connection = await consumer_on(broker, 7)
    await connection.exchange(client.flow(7, 3))
    ack = client.ack(7, [at(2)], cumulative=True)
    ack.ack.message_id[0].ack_set.append(0b110)  # messages 1 and 2 of the batch still open
    await connection.exchange(ack)
    cursor = broker.broker.topics[TOPIC].subscriptions["sub"].cursor
    assert cursor.mark_delete_position == at(1)
    assert cursor.batch_ack_set(at(2)) == (0b110,)  # message 0 stays acknowledged


async def test_an_ack_for_an_unknown_consumer_is_answered_when_asked() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    assert await connection.exchange(client.ack(7, [at(0)], request_id=5)) == replies(
        commands.ack_response(
            7, 5, error=pb.ConsumerNotFound, message="no consumer with id 7 on this connection"
        )
    )
    assert await connection.exchange(client.ack(7, [at(0)])) == []


async def test_failover_tells_each_consumer_once_whether_it_is_active() -> None:
    broker = await broker_with_messages(2, active_consumer_failover_delay_time_millis=0)
    b = await broker.client()
    frames = await b.exchange(client.subscribe(TOPIC, "sub", 1, 11, FAILOVER, EARLIEST, "b"))
    assert frames == replies(commands.success(11), commands.active_consumer_change(1, True))
    assert await b.exchange(client.flow(1, 1)) == messages(1, (0, 0))

    a = await broker.client()
    frames = await a.exchange(client.subscribe(TOPIC, "sub", 2, 12, FAILOVER, EARLIEST, "a"))
    assert frames == replies(commands.success(12), commands.active_consumer_change(2, True))
    assert b.received() == replies(commands.active_consumer_change(1, False))
    assert await a.exchange(client.flow(2, 5)) == messages(2, (0, 1), (1, 0))

    a.disconnect()
    await settle()
    assert b.received() == replies(commands.active_consumer_change(1, True))


async def test_unsubscribing_needs_the_last_consumer_and_forgets_the_cursor() -> None:
    broker = await broker_with_messages(1)
    first = await consumer_on(broker, 7)
    second = await consumer_on(broker, 8)
    assert await first.exchange(client.unsubscribe(7, 60)) == replies(
        commands.error(60, pb.NotAllowedError, "subscription 'sub' has 1 other consumer(s)")
    )
    assert await second.exchange(client.close_consumer(8, 61)) == replies(commands.success(61))
    assert await first.exchange(client.unsubscribe(7, 62)) == replies(commands.success(62))
    ledger = broker.ledger(TOPIC)
    assert not ledger.cursors.exists("sub")
    assert ledger.cursor_table.items() == []


async def test_a_full_socket_holds_messages_back_until_it_drains() -> None:
    broker = await broker_with_messages(1)
    connection = await consumer_on(broker, 7)
    connection.transport.buffer_full(True)
    assert await connection.exchange(client.flow(7, 10)) == []
    connection.transport.buffer_full(False)
    await settle()
    assert connection.received() == messages(7, (0, 0))


async def test_a_batch_acked_in_part_keeps_its_ack_set_across_a_restart() -> None:
    broker = await broker_with_messages(3)
    connection = await consumer_on(broker, 7)
    await connection.exchange(client.flow(7, 3))
    ack = client.ack(7, [at(1)])
    ack.ack.message_id[0].ack_set.append(0b110)  # messages 1 and 2 of the batch still open
    await connection.exchange(ack)
    await connection.exchange(client.ack(7, [at(0)]))

    restarted = await broker.restarted()
    again = await consumer_on(restarted, 9)
    assert await again.exchange(client.flow(9, 10)) == [
        Frame(commands.message(9, 1, 1, ack_set=[0b110]), BLOCKS[1]),
        *messages(9, (2, 0)),
    ]
    ack = client.ack(9, [at(1)])
    ack.ack.message_id[0].ack_set.append(0b001)  # the rest of the batch
    await again.exchange(ack)
    cursor = restarted.broker.topics[TOPIC].subscriptions["sub"].cursor
    assert cursor.mark_delete_position == at(1)
    assert cursor.batch_acks() == {}


async def test_a_cumulative_ack_of_the_entry_before_a_ledger_acknowledges_nothing_of_it() -> None:
    """Clients send ``(L, -1)`` (as uint64) for the entry before the first one of ledger L:
    it must not acknowledge the rest of L, which the consumer has not received."""
    broker = await broker_with_messages(2)
    broker = await broker.restarted()
    producer = await broker.client()
    await producer.exchange(client.producer(TOPIC, 1, 1, "p"))
    producer.send(client.send(1, 2), BLOCKS[2])
    await settle()
    first, second = (info.ledger_id for info in broker.ledger(TOPIC).ledgers())
    connection = await consumer_on(broker, 7, pb.CommandSubscribe.Exclusive)
    await connection.exchange(client.flow(7, 1))
    await connection.exchange(client.ack(7, [Position(first, -1)], cumulative=True))
    await connection.exchange(client.redeliver_unacknowledged(7, [Position(first, 0)]))
    cursor = broker.broker.topics[TOPIC].subscriptions["sub"].cursor
    assert cursor.mark_delete_position == Position(first, -1)

    await connection.exchange(client.ack(7, [Position(second, -1)], cumulative=True))
    assert cursor.mark_delete_position == Position(first, 1)
    restarted = await broker.restarted()
    again = await consumer_on(restarted, 9)
    frames = await again.exchange(client.flow(9, 10))
    assert frames == [Frame(commands.message(9, second, 0), BLOCKS[2])]
