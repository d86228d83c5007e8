"""Pulsar frames: splitting a byte stream into commands, and encoding commands and messages.

Wire layout (all integers big-endian)::

    simple command:   [totalSize:4][commandSize:4][BaseCommand]
    payload command:  [totalSize:4][commandSize:4][BaseCommand][message block]
    message block:    ([0x0e02][brokerEntryMetadataSize:4][BrokerEntryMetadata])?
                      ([0x0e01][crc32c:4])?
                      [metadataSize:4][MessageMetadata][payload]

``totalSize`` counts everything after itself. The CRC32C covers ``metadataSize``,
metadata and payload. The broker never re-encodes a message block: what a producer sent
after SEND is stored verbatim and sent back after MESSAGE.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from dedup_broker.errors import FrameTooLargeError, ProtocolError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.checksum import crc32c
from dedup_broker.protocol.commands import command_name, sub_command_field

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

#: Pulsar's default maxMessageSize (5 MiB), the default frame limit.
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024
#: Room Pulsar allows a frame beyond maxMessageSize for the command and metadata
#: (Pulsar's MESSAGE_SIZE_FRAME_PADDING): a connection whose negotiated maxMessageSize is
#: M decodes with ``FrameDecoder(M + FRAME_PADDING)``.
FRAME_PADDING = 10 * 1024

_PAYLOAD_TYPES = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_FRAME_HEADER = struct.Struct(">II")  # totalSize, commandSize
_CRC_HEADER = struct.Struct(">HII")  # magic, checksum, metadataSize
_MAGIC_CRC32C_BYTES = _U16.pack(MAGIC_CRC32C)
_MAGIC_BEM_BYTES = _U16.pack(MAGIC_BROKER_ENTRY_METADATA)


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.

    ``payload`` is set for SEND and MESSAGE only: the exact message block that followed
    the command (checksum magic, checksum, metadata size, metadata, payload).
    """

    command: pb.BaseCommand
    payload: bytes | None


def _missing_fields(message: Message) -> str:
    errors: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]
    return ", ".join(errors)


def _decode_command(data: bytes) -> pb.BaseCommand:
    """Parses and validates a BaseCommand; every required field must be present."""
    cmd = pb.BaseCommand()
    try:
        cmd.ParseFromString(data)
    except DecodeError as exc:
        raise ProtocolError(f"command does not parse as BaseCommand: {exc}") from exc
    if not cmd.HasField("type"):
        raise ProtocolError("command has no type or an unknown type")
    field = sub_command_field(cmd.type)
    if field is None or not cmd.HasField(field):
        raise ProtocolError(f"{command_name(cmd)} command lacks its {field} body")
    if not cmd.IsInitialized():
        raise ProtocolError(
            f"{command_name(cmd)} command lacks required fields: {_missing_fields(cmd)}"
        )
    return cmd


class FrameDecoder:
    """Turns the bytes of one connection into frames.

    ``max_frame_size`` bounds ``totalSize`` (the frame after its 4-byte size field); it
    may be changed at any time, e.g. once CONNECT has negotiated the message size.
    Partial frames are buffered across :meth:`feed` calls; a frame's size is checked
    from its 4-byte header before its body is buffered, so an oversized frame is refused
    without holding it in memory. After any error the decoder stays failed and every
    later call raises: the stream position is lost and the connection must be closed.
    """

    __slots__ = ("_buffer", "_failed", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not fully arrived yet."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Adds received bytes; returns the frames they complete, in order."""
        if self._failed:
            raise ProtocolError("frame decoder already failed; the connection must close")
        try:
            return self._feed(data)
        except ProtocolError:
            self._failed = True
            self._buffer = bytearray()
            raise

    def _feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        # Frames are cut straight out of ``data`` when nothing is pending, so the common
        # case (whole frames per read) copies each frame once; otherwise ``data`` joins
        # the buffer, whose growth and front-trimming are both amortised O(1) per byte.
        source: bytes | bytearray | memoryview
        if self._buffer:
            self._buffer += data
            source = self._buffer
        else:
            source = data
        frames: list[Frame] = []
        end = len(source)
        pos = 0
        view = memoryview(source)
        try:
            while end - pos >= 4:
                (total,) = _I32.unpack_from(view, pos)
                self._check_total_size(total)
                if end - pos - 4 < total:
                    break
                frames.append(self._decode_frame(view[pos + 4 : pos + 4 + total]))
                pos += 4 + total
            if source is not self._buffer and pos < end:
                self._buffer = bytearray(view[pos:])
                pos = end
        finally:
            view.release()
        if source is self._buffer:
            del self._buffer[:pos]
        return frames

    def _check_total_size(self, total: int) -> None:
        if total < 0:
            raise ProtocolError(f"negative frame size {total}")
        if total < 4:
            raise ProtocolError(f"frame size {total} cannot hold a command size")
        if total > self.max_frame_size:
            raise FrameTooLargeError(
                f"frame size {total} exceeds the limit of {self.max_frame_size} bytes"
            )

    @staticmethod
    def _decode_frame(frame: memoryview) -> Frame:
        (command_size,) = _I32.unpack_from(frame, 0)
        if command_size <= 0 or command_size > len(frame) - 4:
            raise ProtocolError(
                f"command size {command_size} does not fit a frame of {len(frame)} bytes"
            )
        cmd = _decode_command(bytes(frame[4 : 4 + command_size]))
        rest = len(frame) - 4 - command_size
        if cmd.type in _PAYLOAD_TYPES:
            if rest == 0:
                raise ProtocolError(f"{command_name(cmd)} frame carries no message")
            return Frame(cmd, bytes(frame[4 + command_size :]))
        if rest:
            raise ProtocolError(f"{command_name(cmd)} frame has {rest} unexpected trailing bytes")
        return Frame(cmd, None)


# ---------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------


def encode_command(command: pb.BaseCommand) -> bytes:
    """A simple (payload-less) frame."""
    body = command.SerializeToString()
    size = len(body)
    return _FRAME_HEADER.pack(size + 4, size) + body


def payload_command_parts(command: pb.BaseCommand, payload: bytes) -> tuple[bytes, bytes]:
    """A payload frame as (header + command, message block), for a vectored write.

    Lets the server hand a stored entry to the transport without copying it at all.
    """
    body = command.SerializeToString()
    size = len(body)
    return _FRAME_HEADER.pack(4 + size + len(payload), size) + body, payload


def encode_payload_command(command: pb.BaseCommand, payload: bytes) -> bytes:
    """A payload frame; ``payload`` is an already-encoded message block, sent verbatim."""
    head, block = payload_command_parts(command, payload)
    return b"".join((head, block))


def encode_message(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    """A message block with its CRC32C: [0x0e01][crc][metadataSize][metadata][payload]."""
    meta = metadata.SerializeToString()
    size_and_meta = _U32.pack(len(meta)) + meta
    checksum = crc32c(payload, crc32c(size_and_meta))
    return b"".join((_MAGIC_CRC32C_BYTES, _U32.pack(checksum), size_and_meta, payload))


def add_broker_entry_metadata(block: bytes, metadata: pb.BrokerEntryMetadata) -> bytes:
    """Prefixes a message block with broker entry metadata (replacing any already there)."""
    _, start = _skip_broker_entry_metadata(block)
    data = metadata.SerializeToString()
    return b"".join((_MAGIC_BEM_BYTES, _U32.pack(len(data)), data, memoryview(block)[start:]))


def strip_broker_entry_metadata(block: bytes) -> bytes:
    """The block without its broker entry metadata, for clients that do not support it."""
    _, start = _skip_broker_entry_metadata(block)
    return block if start == 0 else block[start:]


# ---------------------------------------------------------------------------------------
# Parsing message blocks
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class ParsedMessage:
    """A message block taken apart; ``payload`` is still compressed if the producer did."""

    metadata: pb.MessageMetadata
    payload: bytes
    checksum_present: bool
    checksum_valid: bool
    broker_entry_metadata: pb.BrokerEntryMetadata | None


@dataclass(frozen=True, slots=True)
class _Layout:
    broker_entry_metadata: pb.BrokerEntryMetadata | None
    checksum: int | None
    checked_from: int  # where the checksummed bytes (metadataSize...) start
    metadata_start: int
    metadata_end: int


def _skip_broker_entry_metadata(block: bytes) -> tuple[pb.BrokerEntryMetadata | None, int]:
    if len(block) < 2 or _U16.unpack_from(block, 0)[0] != MAGIC_BROKER_ENTRY_METADATA:
        return None, 0
    if len(block) < 6:
        raise ProtocolError("message block truncated inside broker entry metadata header")
    (size,) = _I32.unpack_from(block, 2)
    if size < 0 or 6 + size > len(block):
        raise ProtocolError(f"broker entry metadata size {size} does not fit the block")
    bem = pb.BrokerEntryMetadata()
    try:
        bem.ParseFromString(block[6 : 6 + size])
    except DecodeError as exc:
        raise ProtocolError(f"broker entry metadata does not parse: {exc}") from exc
    return bem, 6 + size


def _layout(block: bytes) -> _Layout:
    bem, pos = _skip_broker_entry_metadata(block)
    checksum: int | None = None
    if len(block) - pos >= 2 and _U16.unpack_from(block, pos)[0] == MAGIC_CRC32C:
        if len(block) - pos < 6:
            raise ProtocolError("message block truncated inside its checksum")
        (checksum,) = _U32.unpack_from(block, pos + 2)
        pos += 6
    if len(block) - pos < 4:
        raise ProtocolError("message block truncated before its metadata size")
    (meta_size,) = _I32.unpack_from(block, pos)
    if meta_size < 0 or pos + 4 + meta_size > len(block):
        raise ProtocolError(f"metadata size {meta_size} does not fit the message block")
    return _Layout(bem, checksum, pos, pos + 4, pos + 4 + meta_size)


def _parse_metadata(block: bytes, layout: _Layout) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(block[layout.metadata_start : layout.metadata_end])
    except DecodeError as exc:
        raise ProtocolError(f"message metadata does not parse: {exc}") from exc
    if not metadata.IsInitialized():
        raise ProtocolError(f"message metadata lacks required fields: {_missing_fields(metadata)}")
    return metadata


def _checksum_matches(block: bytes, layout: _Layout) -> bool:
    if layout.checksum is None:
        return True
    with memoryview(block) as view:
        return crc32c(view[layout.checked_from :]) == layout.checksum


def parse_message(block: bytes) -> ParsedMessage:
    """Takes a message block apart (with or without checksum or broker entry metadata)."""
    layout = _layout(block)
    metadata = _parse_metadata(block, layout)
    return ParsedMessage(
        metadata=metadata,
        payload=block[layout.metadata_end :],
        checksum_present=layout.checksum is not None,
        checksum_valid=_checksum_matches(block, layout),
        broker_entry_metadata=layout.broker_entry_metadata,
    )


def verify_checksum(block: bytes) -> bool:
    """True when the block carries no checksum or its CRC32C matches.

    Raises ProtocolError when the block is too short to even hold its headers.
    """
    return _checksum_matches(block, _layout(block))


def payload_view(block: bytes) -> memoryview:
    """The block's payload, with no metadata parsed, no checksum computed and no copy:
    for a reader that has the metadata already and trusts the block (checked on
    arrival)."""
    return memoryview(block)[_layout(block).metadata_end :]


def parse_metadata_only(block: bytes) -> pb.MessageMetadata:
    """The block's metadata, without computing the checksum or copying the payload."""
    return _parse_metadata(block, _layout(block))
