"""Batches: building, splitting, compression and sequence ranges."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest

from dedup_broker.errors import ProtocolError, UnsupportedCompressionError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import (
    SingleMessage,
    batch_sequence_range,
    build_batch,
    compress,
    decompress,
    is_batch,
    scan_batch,
    split_batch,
)

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]


def _single(
    seq: int | None = None, key: str | None = None, **extra: object
) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=0, **extra)  # type: ignore[arg-type]
    if seq is not None:
        single.sequence_id = seq
    if key is not None:
        single.partition_key = key
    return single


def _entry_metadata(
    sequence_id: int, count: int, compression: int = pb.NONE, uncompressed: int = 0
) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    metadata.num_messages_in_batch = count
    if compression != pb.NONE:
        metadata.compression = compression  # type: ignore[assignment]
        metadata.uncompressed_size = uncompressed
    return metadata


def test_build_batch_exact_bytes() -> None:
    single = _single(seq=5)
    payload = build_batch([(single, b"abc")])
    meta = pb.SingleMessageMetadata(payload_size=3, sequence_id=5).SerializeToString()
    assert payload == struct.pack(">I", len(meta)) + meta + b"abc"
    # The caller's metadata is not modified.
    assert single.payload_size == 0


def test_split_build_round_trip_in_order() -> None:
    compacted = _single(seq=11, key="b", compacted_out=True)
    null = _single(seq=12, key="c", null_value=True)
    records = [
        (_single(seq=10, key="a"), b"first"),
        (compacted, b""),
        (null, b""),
        (_single(seq=13), b"last" * 100),
    ]
    payload = build_batch(records)
    messages = split_batch(_entry_metadata(10, 4), payload)
    assert [m.payload for m in messages] == [b"first", b"", b"", b"last" * 100]
    assert [m.metadata.sequence_id for m in messages] == [10, 11, 12, 13]
    assert [m.metadata.payload_size for m in messages] == [5, 0, 0, 400]
    assert messages[1].metadata.compacted_out
    assert messages[2].metadata.null_value
    assert messages[0].metadata.partition_key == "a"
    assert build_batch([(m.metadata, m.payload) for m in messages]) == payload


def test_non_batch_entry_is_one_message() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=42, publish_time=1)
    metadata.properties.add(key="x", value="y")
    metadata.partition_key = "key"
    metadata.ordering_key = b"ok"
    metadata.event_time = 99
    assert not is_batch(metadata)
    messages = split_batch(metadata, b"body")
    assert len(messages) == 1
    single = messages[0]
    assert single.payload == b"body"
    assert single.metadata.sequence_id == 42
    assert single.metadata.partition_key == "key"
    assert single.metadata.ordering_key == b"ok"
    assert single.metadata.event_time == 99
    assert single.metadata.payload_size == 4
    assert [(p.key, p.value) for p in single.metadata.properties] == [("x", "y")]


def test_empty_batch() -> None:
    assert split_batch(_entry_metadata(1, 0), b"") == []


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_round_trip(codec: int) -> None:
    records = [(_single(seq=100 + i), f"message-{i}".encode() * 20) for i in range(5)]
    raw = build_batch(records)
    compressed = compress(codec, raw)
    if codec != pb.NONE:
        assert compressed != raw
        assert len(compressed) < len(raw)
    metadata = _entry_metadata(100, 5, codec, len(raw))
    assert decompress(codec, compressed, len(raw)) == raw
    messages = split_batch(metadata, compressed)
    assert messages == [SingleMessage(_with_size(s, p), p) for s, p in records]
    assert batch_sequence_range(metadata, compressed) == (100, 104)


def _with_size(single: pb.SingleMessageMetadata, payload: bytes) -> pb.SingleMessageMetadata:
    copy = pb.SingleMessageMetadata()
    copy.CopyFrom(single)
    copy.payload_size = len(payload)
    return copy


def test_zlib_payload_has_the_zlib_header() -> None:
    # Pulsar's ZLIB is the zlib format (RFC 1950), not a raw deflate stream.
    data = b"abc" * 100
    assert decompress(pb.ZLIB, zlib.compress(data), len(data)) == data


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_wrong_uncompressed_size_is_refused(codec: int) -> None:
    data = b"0123456789" * 50
    compressed = compress(codec, data)
    with pytest.raises(ProtocolError):
        decompress(codec, compressed, len(data) + 10)
    with pytest.raises(ProtocolError):
        decompress(codec, compressed, len(data) - 10)


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_garbage_does_not_decompress(codec: int) -> None:
    with pytest.raises(ProtocolError, match=r"does not decompress|inflates to"):
        decompress(codec, b"\xff\xfe\xfd not compressed at all", 100)


def test_unknown_codec_and_size_cap() -> None:
    with pytest.raises(UnsupportedCompressionError, match="compression type 9"):
        decompress(9, b"x", 1)
    with pytest.raises(ProtocolError, match="outside"):
        decompress(pb.ZLIB, zlib.compress(b"x" * 1000), 1000, max_size=999)


def _scanned(metadata: pb.MessageMetadata, payload: bytes) -> list[SingleMessage]:
    """What ``scan_batch`` shows, copied out step by step (it reuses its objects)."""
    out = []
    for single, view in scan_batch(metadata, payload):
        out.append(SingleMessage(_with_size(single, bytes(view)), bytes(view)))
    return out


Reader = Callable[[pb.MessageMetadata, bytes], list[SingleMessage]]
READERS = [pytest.param(split_batch, id="split"), pytest.param(_scanned, id="scan")]


@pytest.mark.parametrize("codec", CODECS)
def test_scanning_shows_what_splitting_returns(codec: int) -> None:
    null = _single(seq=2, key="n", null_partition_key=True)
    records = [(_single(seq=1, key="a"), b"first"), (null, b""), (_single(seq=3), b"x" * 300)]
    raw = build_batch(records)
    metadata = _entry_metadata(1, 3, codec, len(raw))
    payload = compress(codec, raw)
    assert _scanned(metadata, payload) == split_batch(metadata, payload)
    plain = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1, partition_key="k")
    assert _scanned(plain, b"body") == split_batch(plain, b"body")


@pytest.mark.parametrize("read", READERS)
def test_truncated_and_oversized_batches(read: Reader) -> None:
    payload = build_batch([(_single(seq=1), b"abc"), (_single(seq=2), b"def")])
    with pytest.raises(ProtocolError, match="truncated before message 2"):
        read(_entry_metadata(1, 3), payload)
    with pytest.raises(ProtocolError, match="bytes after its 1 messages"):
        read(_entry_metadata(1, 1), payload)
    with pytest.raises(ProtocolError, match="payload size"):
        read(_entry_metadata(1, 2), payload[:-1])
    with pytest.raises(ProtocolError, match="metadata size"):
        read(_entry_metadata(1, 1), struct.pack(">I", 1000) + b"x")
    with pytest.raises(ProtocolError, match="does not parse"):
        read(_entry_metadata(1, 1), struct.pack(">I", 2) + b"\xff\xff")
    with pytest.raises(ProtocolError, match="lacks payload_size"):
        read(_entry_metadata(1, 1), struct.pack(">I", 0))


@pytest.mark.parametrize("read", READERS)
def test_encrypted_batch_cannot_be_split(read: Reader) -> None:
    metadata = _entry_metadata(1, 2)
    metadata.encryption_keys.add(key="k", value=b"v")
    with pytest.raises(ProtocolError, match="encrypted"):
        read(metadata, b"opaque")
    assert batch_sequence_range(metadata, b"opaque") == (1, 2)


def test_sequence_range_single_message() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    assert batch_sequence_range(metadata, b"whatever") == (7, 7)


def test_sequence_range_uses_highest_sequence_id_when_set() -> None:
    payload = build_batch([(_single(), b"a"), (_single(), b"b")])
    metadata = _entry_metadata(20, 2)
    metadata.highest_sequence_id = 35
    assert batch_sequence_range(metadata, payload) == (20, 35)


def test_sequence_range_ignores_a_highest_below_lowest() -> None:
    payload = build_batch([(_single(seq=20), b"a"), (_single(seq=26), b"b")])
    metadata = _entry_metadata(20, 2)
    metadata.highest_sequence_id = 3
    assert batch_sequence_range(metadata, payload) == (20, 26)


def test_sequence_range_from_single_message_ids() -> None:
    # What C++-based clients send: no highest_sequence_id, one id per message.
    payload = build_batch([(_single(seq=s), b"x") for s in (50, 51, 60)])
    assert batch_sequence_range(_entry_metadata(50, 3), payload) == (50, 60)


def test_sequence_range_falls_back_to_the_message_count() -> None:
    payload = build_batch([(_single(), b"x") for _ in range(4)])
    assert batch_sequence_range(_entry_metadata(8, 4), payload) == (8, 11)


def test_sequence_range_of_a_malformed_batch_raises() -> None:
    with pytest.raises(ProtocolError):
        batch_sequence_range(_entry_metadata(1, 2), b"\x00\x00\x00\xffgarbage")
