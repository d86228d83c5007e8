"""Message blocks: checksum, metadata, payload and broker entry metadata."""

from __future__ import annotations

import struct

import pytest

from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.checksum import crc32c
from dedup_broker.protocol.framing import (
    add_broker_entry_metadata,
    encode_message,
    parse_message,
    parse_metadata_only,
    strip_broker_entry_metadata,
    verify_checksum,
)


def _metadata() -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(
        producer_name="producer-1", sequence_id=12, publish_time=1_700_000_000_000
    )
    metadata.properties.add(key="k", value="v")
    metadata.partition_key = "pk"
    return metadata


def test_crc32c_known_vector_and_incremental() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"56789", crc32c(b"1234")) == 0xE3069283
    assert crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


def test_encode_message_exact_layout() -> None:
    metadata = _metadata()
    meta = metadata.SerializeToString()
    block = encode_message(metadata, b"hello")
    checked = struct.pack(">I", len(meta)) + meta + b"hello"
    assert block == b"\x0e\x01" + struct.pack(">I", crc32c(checked)) + checked


def test_parse_message_round_trip() -> None:
    block = encode_message(_metadata(), b"hello")
    parsed = parse_message(block)
    assert parsed.metadata == _metadata()
    assert parsed.payload == b"hello"
    assert parsed.checksum_present
    assert parsed.checksum_valid
    assert parsed.broker_entry_metadata is None
    assert verify_checksum(block)
    assert parse_metadata_only(block) == _metadata()


def test_empty_payload() -> None:
    parsed = parse_message(encode_message(_metadata(), b""))
    assert parsed.payload == b""
    assert parsed.checksum_valid


def test_corrupted_payload_fails_the_checksum() -> None:
    block = bytearray(encode_message(_metadata(), b"hello"))
    block[-1] ^= 0x01
    assert not verify_checksum(bytes(block))
    parsed = parse_message(bytes(block))
    assert parsed.checksum_present
    assert not parsed.checksum_valid
    assert parsed.payload == b"helln"


def test_corrupted_checksum_field_fails_the_checksum() -> None:
    block = bytearray(encode_message(_metadata(), b"hello"))
    block[3] ^= 0x80
    assert not verify_checksum(bytes(block))


def test_block_without_checksum() -> None:
    meta = _metadata().SerializeToString()
    block = struct.pack(">I", len(meta)) + meta + b"raw"
    parsed = parse_message(block)
    assert not parsed.checksum_present
    assert parsed.checksum_valid
    assert parsed.payload == b"raw"
    assert verify_checksum(block)


def test_broker_entry_metadata_add_parse_strip() -> None:
    block = encode_message(_metadata(), b"hello")
    bem = pb.BrokerEntryMetadata(broker_timestamp=123, index=456)
    with_bem = add_broker_entry_metadata(block, bem)
    encoded = bem.SerializeToString()
    assert with_bem == b"\x0e\x02" + struct.pack(">I", len(encoded)) + encoded + block
    parsed = parse_message(with_bem)
    assert parsed.broker_entry_metadata == bem
    assert parsed.metadata == _metadata()
    assert parsed.payload == b"hello"
    assert parsed.checksum_valid
    assert verify_checksum(with_bem)
    assert parse_metadata_only(with_bem) == _metadata()
    assert strip_broker_entry_metadata(with_bem) == block
    assert strip_broker_entry_metadata(block) is block
    # Replacing keeps a single prefix.
    replaced = add_broker_entry_metadata(with_bem, pb.BrokerEntryMetadata(index=7))
    assert parse_message(replaced).broker_entry_metadata == pb.BrokerEntryMetadata(index=7)
    assert strip_broker_entry_metadata(replaced) == block


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (b"", "before its metadata size"),
        (b"\x0e\x01\x00\x00", "inside its checksum"),
        (b"\x0e\x01\x00\x00\x00\x00\x00\x00", "before its metadata size"),
        (b"\x0e\x02\x00\x00", "broker entry metadata header"),
        (b"\x0e\x02\x00\x00\x00\x09\x08", "does not fit"),
        (b"\x00\x00\x00\x10abc", "does not fit"),
        (b"\xff\xff\xff\xffabc", "does not fit"),
        (b"\x00\x00\x00\x02\xff\xff", "does not parse"),
        # parses, but producer_name / sequence_id / publish_time are missing
        (b"\x00\x00\x00\x02\x0a\x00", "lacks required fields"),
    ],
)
def test_malformed_blocks(block: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_message(block)
    with pytest.raises(ProtocolError):
        parse_metadata_only(block)


def test_verify_checksum_rejects_truncated_headers() -> None:
    with pytest.raises(ProtocolError):
        verify_checksum(b"\x0e\x01\x00")
