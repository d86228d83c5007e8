"""Dropping messages out of a batch entry keeps the rest, their metadata and the range."""

from __future__ import annotations

import pytest

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


def _batch(compression: int) -> tuple[pb.MessageMetadata, list[SingleMessage]]:
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
    return meta, split_batch(meta, compress(compression, raw))


@pytest.mark.parametrize("compression", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_rewritten_batch_holds_the_kept_messages_and_the_sequence_range(
    compression: int,
) -> None:
    meta, messages = _batch(compression)
    keep = [True, False, True, False, True]
    new_meta, block = rewrite_batch(meta, messages, keep, highest_sequence_id=14)
    assert verify_checksum(block)
    parsed = parse_message(block)
    assert parsed.metadata.num_messages_in_batch == 3
    assert parsed.metadata.compression == compression
    assert parsed.metadata.producer_name == "p"
    assert parsed.metadata.publish_time == 1234
    assert new_meta == parsed.metadata
    again = split_batch(parsed.metadata, parsed.payload)
    assert [m.payload for m in again] == [messages[i].payload for i in (0, 2, 4)]
    assert [m.metadata.sequence_id for m in again] == [10, 12, 14]
    assert [m.metadata.properties[0].value for m in again] == ["e0", "e2", "e4"]
    assert batch_sequence_range(parsed.metadata, parsed.payload) == (10, 14)


def test_keep_flags_must_match_the_messages() -> None:
    meta, messages = _batch(pb.NONE)
    with pytest.raises(ValueError):
        rewrite_batch(meta, messages, [True], None)


def test_the_original_entry_is_left_untouched() -> None:
    meta, messages = _batch(pb.NONE)
    before = encode_message(meta, build_batch([(m.metadata, m.payload) for m in messages]))
    rewrite_batch(meta, messages, [False, True, True, True, True], 14)
    assert meta.num_messages_in_batch == 5
    assert encode_message(meta, build_batch([(m.metadata, m.payload) for m in messages])) == before
