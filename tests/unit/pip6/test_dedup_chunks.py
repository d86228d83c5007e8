"""PIP-6 deduplication of chunked messages.

All chunks of one message carry the message's sequence id. Only the last chunk moves
the producer's high-water mark (a naive "sequence id <= last seen" check would drop
chunks 1..n-1, or refuse them as in flight). Unlike Pulsar, which stores the earlier
chunks of a resent message again, every chunk is stored once: a chunk stored before is
answered with its position (while its message is in progress, across restarts too) or
without one (once the message is complete), so no consumer meets a chunk twice (the
C++-based clients drop a message whose chunk 0 comes twice).
"""

from __future__ import annotations

import asyncio

from dedup_broker.domain import send_order
from dedup_broker.protocol import commands
from dedup_broker.protocol.framing import Frame, parse_metadata_only
from dedup_broker.storage.api import Position
from harness import client_commands as client
from harness.client_commands import message_block
from harness.memory_broker import MemoryBroker, WireClient, settle

TOPIC = "persistent://public/default/chunks"
CHUNKS = 3


def dedup_broker() -> MemoryBroker:
    return MemoryBroker.configured(broker_deduplication_enabled=True)


async def producer_on(broker: MemoryBroker, name: str = "p") -> WireClient:
    connection = await broker.client()
    frames = await connection.exchange(client.producer(TOPIC, 1, 10, name))
    assert frames == [Frame(commands.producer_success(10, name), None)]
    return connection


def send_chunk(connection: WireClient, sequence_id: int, chunk_id: int) -> None:
    block = message_block(
        "p",
        sequence_id,
        payload=f"part {chunk_id} of {sequence_id}".encode(),
        uuid=f"p-{sequence_id}",
        num_chunks_from_msg=CHUNKS,
        total_chunk_msg_size=CHUNKS * 12,
        chunk_id=chunk_id,
    )
    connection.send(client.send(1, sequence_id), block)


def send_message(connection: WireClient, sequence_id: int) -> None:
    for chunk_id in range(CHUNKS):
        send_chunk(connection, sequence_id, chunk_id)


def receipts(*expected: tuple[int, int, int]) -> list[Frame]:
    return [
        Frame(commands.send_receipt(1, seq, ledger, entry), None) for seq, ledger, entry in expected
    ]


async def stored_chunks(broker: MemoryBroker) -> list[tuple[int, int]]:
    """(sequence id, chunk id) of every stored entry, in order."""
    ledger = broker.ledger(TOPIC)
    entries = await ledger.read_entries(ledger.first_position(), 1000)
    out = []
    for entry in entries:
        metadata = parse_metadata_only(entry.data)
        out.append((metadata.sequence_id, metadata.chunk_id))
    return out


async def last_sequence_id(broker: MemoryBroker) -> int:
    return (await broker.topic(TOPIC)).last_sequence_id("p")


async def test_every_chunk_is_stored_and_only_the_last_moves_the_mark() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    send_chunk(connection, 0, 0)
    await settle()
    assert connection.received() == receipts((0, 1, 0))
    assert await last_sequence_id(broker) == -1
    send_chunk(connection, 0, 1)
    await settle()
    # Same sequence id as the stored chunk 0: not a duplicate.
    assert connection.received() == receipts((0, 1, 1))
    assert await last_sequence_id(broker) == -1
    send_chunk(connection, 0, 2)
    await settle()
    assert connection.received() == receipts((0, 1, 2))
    assert await last_sequence_id(broker) == 0
    assert await stored_chunks(broker) == [(0, 0), (0, 1), (0, 2)]


async def test_chunks_of_one_message_in_flight_together_are_all_stored() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    broker.ledger(TOPIC).hold_appends = True
    send_message(connection, 0)
    send_message(connection, 1)
    await settle()
    assert connection.received() == []
    broker.ledger(TOPIC).acknowledge_appends()
    await settle()
    assert connection.received() == receipts(
        *((s, 1, 3 * s + c) for s in (0, 1) for c in (0, 1, 2))
    )
    assert await last_sequence_id(broker) == 1


async def test_a_chunked_message_resent_after_its_last_chunk_is_a_duplicate() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    send_message(connection, 0)
    send_message(connection, 1)
    await settle()
    connection.received()
    send_message(connection, 0)
    await settle()
    # A complete message stored before: nothing of it is stored again.
    assert connection.received() == receipts((0, -1, -1), (0, -1, -1), (0, -1, -1))
    assert await stored_chunks(broker) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert await last_sequence_id(broker) == 1


async def test_a_resent_last_chunk_in_flight_waits_and_is_a_duplicate() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    broker.ledger(TOPIC).hold_appends = True
    send_message(connection, 0)
    send_chunk(connection, 0, 2)
    await settle()
    broker.ledger(TOPIC).acknowledge_appends()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert connection.received() == [
        *receipts((0, 1, 0), (0, 1, 1), (0, 1, 2)),
        Frame(commands.send_receipt(1, 0, -1, -1), None),
    ]


async def test_a_message_whose_last_chunk_never_came_is_taken_when_resent() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    send_message(connection, 0)
    send_chunk(connection, 1, 0)  # the producer went away before chunk 1 and 2
    await settle()
    connection.disconnect()
    await settle()
    again = await broker.client()
    frames = await again.exchange(client.producer(TOPIC, 1, 11, "p"))
    assert frames == [Frame(commands.producer_success(11, "p", last_sequence_id=0), None)]
    send_message(again, 1)
    await settle()
    # Chunk 0 is stored already (at 1:3): its receipt names it, the rest follows it.
    assert again.received() == receipts((1, 1, 3), (1, 1, 4), (1, 1, 5))
    assert await last_sequence_id(broker) == 1
    assert await stored_chunks(broker) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


async def test_after_a_restart_a_resent_chunked_message_is_a_duplicate() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    send_message(connection, 0)
    send_chunk(connection, 1, 0)
    await settle()
    restarted = await broker.restarted(graceful=False)
    again = await restarted.client()
    frames = await again.exchange(client.producer(TOPIC, 1, 11, "p"))
    assert frames == [Frame(commands.producer_success(11, "p", last_sequence_id=0), None)]
    send_message(again, 0)
    send_message(again, 1)
    await settle()
    # The restarted broker replayed message 1's chunk 0 (1:3) and writes to ledger 2.
    assert again.received() == receipts(
        (0, -1, -1), (0, -1, -1), (0, -1, -1), (1, 1, 3), (1, 2, 0), (1, 2, 1)
    )  # fmt: skip
    assert await last_sequence_id(restarted) == 1
    assert await stored_chunks(restarted) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


async def test_a_snapshot_stays_before_a_chunked_message_in_progress() -> None:
    """Recovery must see the chunks of a message in progress: the snapshot does not pass
    the first one, even when taken after it (here at a graceful restart)."""
    broker = dedup_broker()
    connection = await producer_on(broker)
    send_message(connection, 0)
    send_chunk(connection, 1, 0)
    send_chunk(connection, 1, 1)
    await settle()
    restarted = await broker.restarted(graceful=True)
    await restarted.topic(TOPIC)
    cursor = restarted.ledger(TOPIC).cursors.opened()["pulsar.dedup"]
    assert cursor.mark_delete_position == Position(1, 2)
    again = await restarted.client()
    await again.exchange(client.producer(TOPIC, 1, 11, "p"))
    send_message(again, 1)
    await settle()
    assert again.received() == receipts((1, 1, 3), (1, 1, 4), (1, 2, 0))
    assert await stored_chunks(restarted) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


async def test_a_later_message_abandons_the_one_in_progress() -> None:
    broker = dedup_broker()
    connection = await producer_on(broker)
    send_chunk(connection, 0, 0)  # message 0 never completes
    send_message(connection, 1)
    await settle()
    connection.received()
    send_chunk(connection, 0, 0)
    await settle()
    assert connection.received() == receipts((0, -1, -1))  # older than the last stored
