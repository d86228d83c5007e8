"""The replay's fast reading of stored entries agrees with the reference reading."""

from __future__ import annotations

from dedup_fakes import message

from dedup_broker.errors import ProtocolError
from dedup_broker.pip6.stored import ReplayFold, stored_sequence
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch
from dedup_broker.protocol.framing import add_broker_entry_metadata, encode_message


def cpp_batch(producer: str, ids: list[int]) -> bytes:
    payload = build_batch([(pb.SingleMessageMetadata(sequence_id=i), b"m") for i in ids])
    metadata = pb.MessageMetadata(
        producer_name=producer, sequence_id=ids[0], publish_time=1, num_messages_in_batch=len(ids)
    )
    return encode_message(metadata, payload)


def partial(metadata: pb.MessageMetadata) -> bytes:
    """A checksummed block whose metadata lacks required fields."""
    raw = metadata.SerializePartialToString()
    return b"\x0e\x01\x00\x00\x00\x00" + len(raw).to_bytes(4, "big") + raw + b"p"


def without_checksum(block: bytes) -> bytes:
    return block[6:]


BLOCKS = [
    message("a", 4),
    message("a", 2),  # lower than what came before: the highest stays
    message("b", 2**64 - 2),  # -2 as Pulsar's signed long
    message("b", 10, num_messages_in_batch=5, highest_sequence_id=14),
    message("b", 20, num_messages_in_batch=3, highest_sequence_id=19),  # not a real batch
    message("c", 2**63 + 5, num_messages_in_batch=2, highest_sequence_id=2**63 + 6),
    # A highest below the lowest is no use: the batch is read (not a real one: unreadable).
    message("c", 1, num_messages_in_batch=2, highest_sequence_id=2**64 - 1),
    cpp_batch("d", [30, 31, 35]),
    message("e", 7, marker_type=1),
    message("f", 3, uuid="f-3", num_chunks_from_msg=2, chunk_id=0),
    message("f", 3, uuid="f-3", num_chunks_from_msg=2, chunk_id=1),
    message("g", 8, num_chunks_from_msg=1, chunk_id=0),
    message("", 1),
    message("h", 9, properties=[pb.KeyValue(key="k", value="v")]),
    without_checksum(message("i", 11)),
    add_broker_entry_metadata(message("j", 12), pb.BrokerEntryMetadata(index=3)),
]
UNREADABLE = [
    b"\x00\x00\x00\x09not-proto",
    b"\x0e\x01\x00\x00\x00\x00\x00\x00\x00\x05\x0a\x03abc",  # required fields missing
    b"\x0e\x01\x00\x00\x00\x00\x7f\xff\xff\xff",  # metadata size beyond the block
    b"\x0e\x01",
    b"",
    message("k", 1, b"")[:-3],
    partial(pb.MessageMetadata(producer_name="n", sequence_id=1)),  # no publish_time
    partial(  # a property without its value
        pb.MessageMetadata(
            producer_name="n", sequence_id=1, publish_time=1, properties=[pb.KeyValue(key="k")]
        )
    ),
]


def reference(blocks: list[bytes]) -> tuple[dict[str, int], list[int]]:
    """Highest id per producer and the indexes of unreadable blocks, one by one."""
    highest: dict[str, int] = {}
    unreadable: list[int] = []
    for index, block in enumerate(blocks):
        try:
            stored = stored_sequence(block)
        except ProtocolError:
            unreadable.append(index)
            continue
        if stored is not None:
            highest[stored.producer_name] = max(
                highest.get(stored.producer_name, stored.highest), stored.highest
            )
    return highest, unreadable


def test_the_fold_agrees_with_the_reference_reading() -> None:
    fold = ReplayFold()
    blocks = BLOCKS + UNREADABLE
    fold(7, 0, blocks[:5])
    fold(8, 5, blocks[5:])
    highest, entries, unreadable, chunks = fold.take()
    expected, broken = reference(blocks)
    assert highest == expected
    assert highest["c"] == -(2**63) + 6 and highest["b"] == 14 and highest["d"] == 35
    assert "e" not in highest and highest["f"] == 3 and highest[""] == 1
    assert entries == len(blocks)
    assert [(lid, eid) for lid, eid, _ in unreadable] == [(7 if i < 5 else 8, i) for i in broken]
    assert set(range(len(BLOCKS), len(blocks))) <= set(broken)
    assert all(not chunk.is_last for chunk, _, _ in chunks)
    assert fold.take() == ({}, 0, [], [])


def test_the_fold_keeps_its_state_across_calls() -> None:
    fold = ReplayFold()
    fold(1, 0, [message("p", 5)])
    fold(1, 1, [message("p", 3)])
    assert fold.take()[0] == {"p": 5}
