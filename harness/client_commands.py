"""Commands a client sends, and message blocks as producers encode them, for tests that
speak the protocol byte for byte (most builders are ``dedup_broker.protocol.
client_commands``'s)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dedup_broker.protocol import client_commands as commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.client_commands import (
    close_consumer,
    close_producer,
    flow,
    message_id,
    producer,
    send,
    subscribe,
)
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage.values import Position

__all__ = [
    "ack",
    "close_consumer",
    "close_producer",
    "connect",
    "flow",
    "message_block",
    "message_id",
    "producer",
    "redeliver_unacknowledged",
    "send",
    "subscribe",
    "unsubscribe",
]

_BASE = pb.BaseCommand


def message_block(
    producer: str, sequence_id: int, payload: bytes = b"payload", **fields: Any
) -> bytes:
    """A message block (metadata and payload, with its CRC32C) as a producer sends it."""
    metadata = pb.MessageMetadata(
        producer_name=producer, sequence_id=sequence_id, publish_time=1_700_000_000_000, **fields
    )
    return encode_message(metadata, payload)


def connect(protocol_version: int = 21, client_version: str = "test-client") -> pb.BaseCommand:
    return commands.connect(protocol_version, client_version)


def ack(
    consumer_id: int,
    positions: Iterable[Position],
    cumulative: bool = False,
    request_id: int | None = None,
) -> pb.BaseCommand:
    command = _BASE(type=_BASE.ACK)
    out = command.ack
    out.consumer_id = consumer_id
    out.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
    out.message_id.extend(message_id(p) for p in positions)
    if request_id is not None:
        out.request_id = request_id
    return command


def redeliver_unacknowledged(
    consumer_id: int, positions: Iterable[Position] = ()
) -> pb.BaseCommand:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: the given positions (a nack), or all if none."""
    command = _BASE(type=_BASE.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    out = command.redeliverUnacknowledgedMessages
    out.consumer_id = consumer_id
    out.message_ids.extend(message_id(p) for p in positions)
    return command


def unsubscribe(consumer_id: int, request_id: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.UNSUBSCRIBE)
    command.unsubscribe.consumer_id = consumer_id
    command.unsubscribe.request_id = request_id
    return command
