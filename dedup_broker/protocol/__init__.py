"""The Pulsar binary protocol, sans IO: frames, commands, message blocks and batches.

Nothing here touches a socket; the server feeds received bytes to a
:class:`FrameDecoder` and writes what the encoders return.
"""

from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import (
    DEFAULT_MAX_UNCOMPRESSED_SIZE,
    SingleMessage,
    batch_sequence_range,
    build_batch,
    compress,
    decompress,
    is_batch,
    split_batch,
)
from dedup_broker.protocol.checksum import crc32c
from dedup_broker.protocol.commands import (
    CURRENT_PROTOCOL_VERSION,
    as_signed64,
    command_name,
    request_id_of,
    sub_command,
)
from dedup_broker.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FRAME_PADDING,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    Frame,
    FrameDecoder,
    ParsedMessage,
    add_broker_entry_metadata,
    encode_command,
    encode_message,
    encode_payload_command,
    parse_message,
    parse_metadata_only,
    payload_command_parts,
    strip_broker_entry_metadata,
    verify_checksum,
)

__all__ = [
    "CURRENT_PROTOCOL_VERSION",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_UNCOMPRESSED_SIZE",
    "FRAME_PADDING",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "Frame",
    "FrameDecoder",
    "ParsedMessage",
    "SingleMessage",
    "add_broker_entry_metadata",
    "as_signed64",
    "batch_sequence_range",
    "build_batch",
    "command_name",
    "commands",
    "compress",
    "crc32c",
    "decompress",
    "encode_command",
    "encode_message",
    "encode_payload_command",
    "is_batch",
    "parse_message",
    "parse_metadata_only",
    "payload_command_parts",
    "pb",
    "request_id_of",
    "split_batch",
    "strip_broker_entry_metadata",
    "sub_command",
    "verify_checksum",
]
