"""Frame decoding and command encoding."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from dedup_broker.errors import FrameTooLargeError, ProtocolError
from dedup_broker.protocol import commands as c
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    encode_command,
    encode_message,
    encode_payload_command,
    payload_command_parts,
)

BUILDERS: dict[str, Callable[[], pb.BaseCommand]] = {
    "connected": lambda: c.connected(
        "dedup-broker 1", 21, 5 * 1024 * 1024, pb.FeatureFlags(supports_auth_refresh=True)
    ),
    "ping": c.ping,
    "pong": c.pong,
    "success": lambda: c.success(7),
    "error": lambda: c.error(8, pb.ServiceNotReady, "try later"),
    "producer_success": lambda: c.producer_success(
        9, "prod", last_sequence_id=41, schema_version=b"\x00\x01", topic_epoch=3
    ),
    "send_receipt": lambda: c.send_receipt(1, 2, 3, 4, highest_sequence_id=5),
    "send_receipt_dup": lambda: c.send_receipt(1, 2, -1, -1),
    "send_error": lambda: c.send_error(1, 2, pb.ChecksumError, "bad crc"),
    "lookup_response": lambda: c.lookup_response(10, "pulsar://localhost:6650"),
    "lookup_failed": lambda: c.lookup_response(
        10, None, error=pb.TopicNotFound, message="no such topic"
    ),
    "partitioned_metadata_response": lambda: c.partitioned_metadata_response(11, 4),
    "partitioned_metadata_failed": lambda: c.partitioned_metadata_response(
        11, error=pb.MetadataError, message="x"
    ),
    "get_last_message_id_response": lambda: c.get_last_message_id_response(
        12, 5, 6, batch_index=2, partition=1, mark_delete=(5, 3)
    ),
    "close_producer": lambda: c.close_producer(13),
    "close_consumer": lambda: c.close_consumer(14),
    "active_consumer_change": lambda: c.active_consumer_change(15, True),
    "reached_end_of_topic": lambda: c.reached_end_of_topic(16),
    "ack_response": lambda: c.ack_response(17, 18),
    "ack_response_error": lambda: c.ack_response(
        17, 18, error=pb.TransactionConflict, message="conflict"
    ),
    "get_topics_of_namespace_response": lambda: c.get_topics_of_namespace_response(
        19, ["persistent://public/default/a", "persistent://public/default/b"]
    ),
    "get_schema_response": lambda: c.get_schema_response(
        20, schema=pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.Json), schema_version=b"1"
    ),
    "get_or_create_schema_response": lambda: c.get_or_create_schema_response(21, b"\x00"),
    "consumer_stats_response": lambda: c.consumer_stats_response(
        22, consumer_name="c", subscription_type="Shared", msg_backlog=5, msg_rate_out=1.5
    ),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_builder_round_trips(name: str) -> None:
    command = BUILDERS[name]()
    frames = FrameDecoder().feed(encode_command(command))
    assert frames == [Frame(command, None)]
    assert frames[0].command.SerializeToString() == command.SerializeToString()


def test_message_builder_round_trips_with_its_payload() -> None:
    command = c.message(3, 10, 20, redelivery_count=2, ack_set=[-1, 7], consumer_epoch=4)
    block = encode_message(
        pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"x"
    )
    frames = FrameDecoder().feed(encode_payload_command(command, block))
    assert frames == [Frame(command, block)]


def test_ping_frame_exact_bytes() -> None:
    assert encode_command(c.ping()) == bytes.fromhex("00000009" + "00000005" + "0812920100")


def test_payload_frame_layout() -> None:
    command = c.message(1, 2, 3)
    body = command.SerializeToString()
    frame = encode_payload_command(command, b"BLOCK")
    assert frame == struct.pack(">II", 4 + len(body) + 5, len(body)) + body + b"BLOCK"
    head, block = payload_command_parts(command, b"BLOCK")
    assert head + block == frame
    assert block == b"BLOCK"


def _stream() -> tuple[bytes, list[Frame]]:
    send = pb.BaseCommand(type=pb.BaseCommand.SEND)
    send.send.producer_id = 1
    send.send.sequence_id = 77
    block = encode_message(
        pb.MessageMetadata(producer_name="p", sequence_id=77, publish_time=5), b"payload"
    )
    expected = [
        Frame(c.ping(), None),
        Frame(send, block),
        Frame(c.success(3), None),
        Frame(c.error(4, pb.UnknownError, "e" * 300), None),
    ]
    data = b"".join(
        encode_payload_command(f.command, f.payload) if f.payload else encode_command(f.command)
        for f in expected
    )
    return data, expected


def test_several_frames_in_one_feed() -> None:
    data, expected = _stream()
    decoder = FrameDecoder()
    assert decoder.feed(data) == expected
    assert decoder.buffered == 0


def test_frames_split_at_every_byte_boundary() -> None:
    data, expected = _stream()
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert got == expected, cut
        assert decoder.buffered == 0


def test_frames_fed_one_byte_at_a_time() -> None:
    data, expected = _stream()
    decoder = FrameDecoder()
    got: list[Frame] = []
    for i in range(len(data)):
        got.extend(decoder.feed(data[i : i + 1]))
    assert got == expected


def test_five_mib_payload_in_64_kib_chunks() -> None:
    payload = bytes(range(256)) * (5 * 1024 * 4)  # 5 MiB
    metadata = pb.MessageMetadata(producer_name="big", sequence_id=1, publish_time=1)
    block = encode_message(metadata, payload)
    command = pb.BaseCommand(type=pb.BaseCommand.SEND)
    command.send.producer_id = 9
    command.send.sequence_id = 1
    frame = encode_payload_command(command, block)
    assert len(frame) > DEFAULT_MAX_FRAME_SIZE
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE + FRAME_PADDING)
    got: list[Frame] = []
    chunk = 64 * 1024
    for start in range(0, len(frame), chunk):
        got.extend(decoder.feed(frame[start : start + chunk]))
        if start + chunk < len(frame):
            assert got == []
    assert got == [Frame(command, block)]
    assert decoder.buffered == 0


def test_frame_too_large_is_refused_from_the_header_alone() -> None:
    decoder = FrameDecoder(1000)
    with pytest.raises(FrameTooLargeError, match="1001"):
        decoder.feed(struct.pack(">I", 1001))
    # The decoder is unusable afterwards.
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(encode_command(c.ping()))


def test_max_frame_size_can_change_after_construction() -> None:
    command = c.error(1, pb.UnknownError, "x" * 100)
    frame = encode_command(command)
    total = len(frame) - 4
    decoder = FrameDecoder(total - 1)
    decoder.max_frame_size = total
    assert decoder.feed(frame) == [Frame(command, None)]
    decoder.max_frame_size = total - 1
    with pytest.raises(FrameTooLargeError):
        decoder.feed(frame)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xff\xff\xff", "negative frame size"),
        (struct.pack(">I", 3) + b"abc", "cannot hold a command size"),
        (struct.pack(">II", 10, 7) + b"\xff" * 6, "does not fit"),
        (struct.pack(">II", 10, 0) + b"\x00" * 6, "does not fit"),
        (struct.pack(">II", 9, 5) + b"\xff\xff\xff\xff\xff", "does not parse"),
        (struct.pack(">II", 6, 2) + bytes.fromhex("08c7"), "does not parse"),
        # type 99 is not a command type
        (struct.pack(">II", 6, 2) + bytes.fromhex("0863"), "no type or an unknown type"),
        # type PING without its CommandPing body
        (struct.pack(">II", 6, 2) + bytes.fromhex("0812"), "PING command lacks its ping body"),
        # SUCCESS body without the required request_id
        (struct.pack(">II", 8, 4) + bytes.fromhex("080d6a00"), "lacks required fields"),
        # PING followed by bytes that no simple command may carry
        (struct.pack(">II", 11, 5) + bytes.fromhex("0812920100") + b"xx", "trailing bytes"),
    ],
)
def test_malformed_frames_raise_protocol_error(data: bytes, match: str) -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match=match):
        decoder.feed(data)
    with pytest.raises(ProtocolError):
        decoder.feed(encode_command(c.ping()))


def test_garbage_bytes_raise_protocol_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")


def test_send_without_a_message_is_refused() -> None:
    send = pb.BaseCommand(type=pb.BaseCommand.SEND)
    send.send.producer_id = 1
    send.send.sequence_id = 1
    with pytest.raises(ProtocolError, match="carries no message"):
        FrameDecoder().feed(encode_command(send))


def test_truncated_frame_waits_for_more_bytes() -> None:
    frame = encode_command(c.error(5, pb.UnknownError, "abc"))
    decoder = FrameDecoder()
    assert decoder.feed(frame[:-1]) == []
    assert decoder.buffered == len(frame) - 1
    assert decoder.feed(frame[-1:]) == [Frame(c.error(5, pb.UnknownError, "abc"), None)]


def test_frames_preceding_a_partial_frame_are_returned() -> None:
    first = encode_command(c.success(1))
    second = encode_command(c.success(2))
    decoder = FrameDecoder()
    assert decoder.feed(first + second[:6]) == [Frame(c.success(1), None)]
    assert decoder.feed(second[6:]) == [Frame(c.success(2), None)]


def test_feed_accepts_memoryview_and_bytearray() -> None:
    frame = encode_command(c.pong())
    decoder = FrameDecoder()
    assert decoder.feed(memoryview(frame)[:5]) == []
    assert decoder.feed(bytearray(frame[5:])) == [Frame(c.pong(), None)]
