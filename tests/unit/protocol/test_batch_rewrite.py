"""Dropping messages out of a batch entry keeps the rest, their metadata and the range."""

from __future__ import annotations

import struct

import pytest

from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import (
    SingleMessage,
    batch_sequence_range,
    build_batch,
    compress,
    split_batch,
)
from dedup_broker.protocol.batch_rewrite import rewrite_batch
from dedup_broker.protocol.framing import encode_message, parse_message, verify_checksum


def _batch(compression: int) -> tuple[pb.MessageMetadata, bytes, list[SingleMessage]]:
    messages = []
    for i in range(5):
        single = pb.SingleMessageMetadata(payload_size=0, sequence_id=10 + i)
        single.properties.add(key="event", value=f"e{i}")
        messages.append(SingleMessage(single, f"payload-{i}".encode() * 20))
    raw = build_batch([(m.metadata, m.payload) for m in messages])
    meta = pb.MessageMetadata(
        producer_name="p",
        sequence_id=10,
        publish_time=1234,
        num_messages_in_batch=5,
        compression=compression,
        uncompressed_size=len(raw),
    )
    payload = compress(compression, raw)
    return meta, payload, split_batch(meta, payload)


@pytest.mark.parametrize("compression", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_rewritten_batch_holds_the_kept_messages_and_the_sequence_range(
    compression: int,
) -> None:
    meta, payload, messages = _batch(compression)
    keep = [True, False, True, False, True]
    new_meta, block = rewrite_batch(meta, payload, keep, highest_sequence_id=14)
    assert verify_checksum(block)
    parsed = parse_message(block)
    assert parsed.metadata.num_messages_in_batch == 3
    assert parsed.metadata.compression == compression
    assert parsed.metadata.producer_name == "p"
    assert parsed.metadata.publish_time == 1234
    assert new_meta == parsed.metadata
    again = split_batch(parsed.metadata, parsed.payload)
    assert again == [messages[i] for i in (0, 2, 4)]
    assert [m.metadata.sequence_id for m in again] == [10, 12, 14]
    assert [m.metadata.properties[0].value for m in again] == ["e0", "e2", "e4"]
    assert batch_sequence_range(parsed.metadata, parsed.payload) == (10, 14)


def test_the_kept_records_are_the_producers_bytes() -> None:
    """A record is copied as sent, even in an encoding this broker would not write."""
    first = pb.SingleMessageMetadata(payload_size=1, sequence_id=1).SerializeToString()
    second = pb.SingleMessageMetadata(sequence_id=2, payload_size=1).SerializeToString()
    second = second[2:] + second[:2]  # payload_size first: valid, not canonical
    records = [struct.pack(">I", len(m)) + m + body for m, body in ((first, b"a"), (second, b"b"))]
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    meta.num_messages_in_batch = 2
    _, block = rewrite_batch(meta, b"".join(records), [False, True], 2)
    assert parse_message(block).payload == records[1]


@pytest.mark.parametrize("keep", [[True], [True] * 6])
def test_keep_flags_must_match_the_messages(keep: list[bool]) -> None:
    meta, payload, _ = _batch(pb.NONE)
    with pytest.raises(ValueError):
        rewrite_batch(meta, payload, keep, None)


def test_only_a_batch_has_messages_to_keep() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    with pytest.raises(ProtocolError, match="batch"):
        rewrite_batch(meta, b"body", [True], None)


def test_the_original_entry_is_left_untouched() -> None:
    meta, payload, _ = _batch(pb.NONE)
    before = encode_message(meta, payload)
    rewrite_batch(meta, payload, [False, True, True, True, True], 14)
    assert meta.num_messages_in_batch == 5
    assert encode_message(meta, payload) == before
