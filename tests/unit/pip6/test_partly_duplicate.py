"""Batches that are partly a resend, and key-based batches, through the real session and
topic on the in-memory storage: what each SEND is answered and what is stored."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.domain import send_order
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch, split_batch
from dedup_broker.protocol.framing import Frame, encode_message, parse_message
from harness import client_commands as client
from harness.memory_broker import MemoryBroker, WireClient, settle

TOPIC = "persistent://public/default/orders"


def batch(
    ids: list[int], highest: bool = False, named: int | None = None, **fields: object
) -> bytes:
    """A batch as the C++-based clients send it (each message's id in its own metadata),
    or with ``highest_sequence_id`` as the Java client adds; ``named``: the batch's own
    sequence id when it is not its first message's."""
    singles = [(pb.SingleMessageMetadata(sequence_id=i), b"m%d" % i) for i in ids]
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=ids[0] if named is None else named,
        publish_time=1,
        num_messages_in_batch=len(ids),
        **fields,  # type: ignore[arg-type]
    )
    if highest:
        metadata.highest_sequence_id = max(ids)
    return encode_message(metadata, build_batch(singles))


def send_batch(
    connection: WireClient, ids: list[int], highest: bool = False, named: int | None = None
) -> None:
    top = max(ids) if highest else None
    first = ids[0] if named is None else named
    command = client.send(1, first, num_messages=len(ids), highest_sequence_id=top)
    connection.send(command, batch(ids, highest, named))


async def producer(broker: MemoryBroker) -> WireClient:
    connection = await broker.client()
    frames = await connection.exchange(client.producer(TOPIC, 1, 10, "p"))
    assert frames[0].command.type == pb.BaseCommand.PRODUCER_SUCCESS
    return connection


def receipt(sequence_id: int, entry_id: int, highest: int | None = None, ledger: int = 1) -> Frame:
    ledger_id = ledger if entry_id >= 0 else -1
    more = {} if highest is None else {"highest_sequence_id": highest}
    return Frame(commands.send_receipt(1, sequence_id, ledger_id, entry_id, **more), None)


async def stored(broker: MemoryBroker) -> list[tuple[int, int, list[tuple[int, bytes]]]]:
    """Each stored entry: its sequence id, highest id (or -1), and its messages."""
    ledger = broker.ledger(TOPIC)
    out = []
    for entry in await ledger.read_entries(ledger.first_position(), 1000):
        parsed = parse_message(entry.data)
        meta = parsed.metadata
        messages = [(m.metadata.sequence_id, m.payload) for m in split_batch(meta, parsed.payload)]
        highest = meta.highest_sequence_id if meta.HasField("highest_sequence_id") else -1
        out.append((meta.sequence_id, highest, messages))
    return out


def ids_of(entries: list[tuple[int, int, list[tuple[int, bytes]]]]) -> list[int]:
    return [i for _, _, messages in entries for i, _ in messages]


async def test_a_batch_resent_from_a_checkpoint_stores_only_its_new_messages() -> None:
    for highest in (False, True):
        broker = MemoryBroker.configured(broker_deduplication_enabled=True)
        first = await producer(broker)
        send_batch(first, list(range(10)), highest)
        await settle()
        first.disconnect()
        again = await producer(broker)  # restarted from checkpoint 5
        send_batch(again, list(range(5, 15)), highest)
        await settle()
        top = 14 if highest else None
        assert again.received() == [receipt(5, 1, top)]
        entries = await stored(broker)
        assert ids_of(entries) == list(range(15))
        # The entry keeps the SEND's range (its highest written out); its messages are
        # the new ones.
        assert entries[1] == (5, 14, [(i, b"m%d" % i) for i in range(10, 15)])
        # Resent once more: every message is stored, one receipt without a position.
        send_batch(again, list(range(5, 15)), highest)
        await settle()
        assert again.received() == [receipt(5, -1, top)]
        assert ids_of(await stored(broker)) == list(range(15))


async def test_a_partly_resent_batch_waits_for_its_earlier_copy_in_flight() -> None:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer(broker)
    ledger = broker.ledger(TOPIC)
    ledger.hold_appends = True
    send_batch(connection, list(range(10)))
    send_batch(connection, list(range(5, 15)))
    await asyncio.sleep(4 * send_order.LOOK_AGAIN_S)
    assert connection.received() == []
    ledger.hold_appends = False
    ledger.acknowledge_appends()
    await settle()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert connection.received() == [receipt(0, 0), receipt(5, 1)]
    assert ids_of(await stored(broker)) == list(range(15))


@pytest.mark.parametrize("shape", ["cpp", "java", "java-key"])
async def test_key_based_batches_are_all_stored_once(shape: str) -> None:
    """Key-based batching sends one run of ids as a batch per key, in the order of their
    lowest ids; each later batch fills holes of the earlier ones. The C++-based clients
    name a batch by its first message's id, the Java client's key-based batcher by its
    last one's (lowest and highest alike)."""
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer(broker)
    keyed = [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
    highest = shape != "cpp"
    names = [ids[-1] if shape == "java-key" else ids[0] for ids in keyed]
    for ids, named in zip(keyed, names, strict=True):
        send_batch(connection, ids, highest, named)
    await settle()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    tops = [max(ids) if highest else None for ids in keyed]
    assert connection.received() == [receipt(names[i], i, tops[i]) for i in range(3)]
    assert sorted(ids_of(await stored(broker))) == list(range(12))
    for ids, named in zip(keyed, names, strict=True):  # the same flush resent: nothing new
        send_batch(connection, ids, highest, named)
    await settle()
    assert connection.received() == [receipt(names[i], -1, tops[i]) for i in range(3)]
    assert len(await stored(broker)) == 3
    # Restarted from id 6: the first message of each key is stored, the rest is new.
    for ids in ([6, 9, 12], [7, 10, 13], [8, 11, 14]):
        send_batch(connection, ids, highest, ids[-1] if shape == "java-key" else None)
    await settle()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert sorted(ids_of(await stored(broker))) == list(range(15))


async def test_holes_survive_a_crash_and_a_snapshot_between_key_batches() -> None:
    broker = MemoryBroker.configured(
        broker_deduplication_enabled=True, broker_deduplication_entries_interval=1
    )
    connection = await producer(broker)
    send_batch(connection, [0, 3, 6, 9])
    await settle()
    topic = await broker.topic(TOPIC)
    assert topic.dedup.state is not None
    await topic.dedup.state.take_snapshot()  # the holes are stored with the marks
    restarted = await broker.restarted(graceful=False)
    connection = await producer(restarted)
    send_batch(connection, [1, 4, 7, 10])
    send_batch(connection, [2, 5, 8, 11])
    send_batch(connection, [0, 3, 6, 9])  # the batch stored before the crash, resent
    await settle()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert connection.received() == [
        receipt(1, 0, ledger=2),  # the restarted broker writes a new ledger
        receipt(2, 1, ledger=2),
        receipt(0, -1),
    ]
    assert sorted(ids_of(await stored(restarted))) == list(range(12))


async def test_ids_skipped_and_sent_later_are_stored_once() -> None:
    """An id left out below the mark (skipped between two entries, as the Java client's
    key-based batches do) is stored when it comes; ids stored are not."""
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer(broker)
    send_batch(connection, [0, 1, 2])
    send_batch(connection, [10, 11])
    await settle()
    send_batch(connection, [5, 11, 12])
    send_batch(connection, [5, 12])
    await settle()
    assert connection.received() == [receipt(0, 0), receipt(10, 1), receipt(5, 2), receipt(5, -1)]
    assert ids_of(await stored(broker)) == [0, 1, 2, 10, 11, 5, 12]


async def test_an_encrypted_batch_partly_stored_is_refused_for_good() -> None:
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer(broker)
    send_batch(connection, [0, 1, 2])
    await settle()
    key = pb.EncryptionKeys(key="k", value=b"v")
    connection.send(
        client.send(1, 1, num_messages=3, highest_sequence_id=3),
        batch([1, 2, 3], highest=True, encryption_keys=[key]),
    )
    await settle()
    [answer] = connection.received()[1:]
    assert answer.command.type == pb.BaseCommand.SEND_ERROR
    assert answer.command.send_error.error == pb.NotAllowedError
    assert "cannot be split" in answer.command.send_error.message
    assert ids_of(await stored(broker)) == [0, 1, 2]


async def test_a_key_based_flush_resent_across_the_mark_stores_every_new_id() -> None:
    """Ids between the mark and a batch's first new id belong to that batch's range: the
    later batches of the flush still store them, after a crash too."""
    broker = MemoryBroker.configured(
        broker_deduplication_enabled=True, broker_deduplication_entries_interval=1
    )
    connection = await producer(broker)
    send_batch(connection, list(range(20)))
    await settle()
    send_batch(connection, [15, 18, 21, 24])  # 15 and 18 stored; 20, 22, 23 are holes
    await settle()
    topic = await broker.topic(TOPIC)
    assert topic.dedup.state is not None
    await topic.dedup.state.take_snapshot()
    restarted = await broker.restarted(graceful=False)
    connection = await producer(restarted)
    send_batch(connection, [16, 19, 22])
    send_batch(connection, [17, 20, 23])
    await settle()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert sorted(ids_of(await stored(restarted))) == list(range(25))


async def test_a_chunked_message_is_judged_by_the_mark_alone() -> None:
    """Its chunks are judged one by one: an id in a hole would let a chunk of a message
    given up be stored twice, which consumers cannot reassemble."""
    broker = MemoryBroker.configured(broker_deduplication_enabled=True)
    connection = await producer(broker)

    def send_chunk(sequence_id: int, chunk_id: int) -> None:
        fields = {"uuid": f"p-{sequence_id}", "num_chunks_from_msg": 2, "chunk_id": chunk_id}
        block = client.message_block("p", sequence_id, b"c%d" % chunk_id, **fields)
        connection.send(client.send(1, sequence_id), block)

    connection.send(client.send(1, 5), client.message_block("p", 5))  # 0..4: holes
    await settle()
    send_chunk(3, 0)
    send_chunk(3, 1)
    send_chunk(6, 0)
    send_chunk(6, 1)
    await settle()
    duplicates = [receipt(3, -1), receipt(3, -1)]
    assert connection.received() == [receipt(5, 0), *duplicates, receipt(6, 1), receipt(6, 2)]
    assert len(await stored(broker)) == 3


async def test_a_new_producers_first_key_based_flush_in_the_java_clients_order() -> None:
    """The Java client sends a flush's key batches in the order of their highest ids:
    the first one may start above ids that come later in the flush. No snapshot keeps the
    ids below a new producer's first (forgetting them only ever makes a duplicate)."""
    broker = MemoryBroker.configured(
        broker_deduplication_enabled=True, broker_deduplication_entries_interval=1
    )
    connection = await producer(broker)
    for ids in ([2], [3], [0, 4], [1, 5]):
        send_batch(connection, ids, highest=True, named=ids[-1])
    await settle()
    await asyncio.sleep(2 * send_order.LOOK_AGAIN_S)
    assert sorted(ids_of(await stored(broker))) == list(range(6))
    topic = await broker.topic(TOPIC)
    assert topic.dedup.state is not None
    await topic.dedup.state.take_snapshot()
    assert broker.ledger(TOPIC).stored_cursor("pulsar.dedup").properties == {"p": 5}
