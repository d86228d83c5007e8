"""Builders for the commands a client sends, and message blocks as producers encode them.

The broker's own answers are built by ``dedup_broker.protocol.commands``; these are the
other direction, for tests that speak the protocol byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage.values import Position

_BASE = pb.BaseCommand
_U64_MASK = (1 << 64) - 1


def message_block(
    producer: str, sequence_id: int, payload: bytes = b"payload", **fields: Any
) -> bytes:
    """A message block (metadata and payload, with its CRC32C) as a producer sends it."""
    metadata = pb.MessageMetadata(
        producer_name=producer, sequence_id=sequence_id, publish_time=1_700_000_000_000, **fields
    )
    return encode_message(metadata, payload)


def connect(protocol_version: int = 21, client_version: str = "test-client") -> pb.BaseCommand:
    command = _BASE(type=_BASE.CONNECT)
    command.connect.client_version = client_version
    command.connect.protocol_version = protocol_version
    return command


def producer(
    topic: str, producer_id: int, request_id: int, producer_name: str | None = None
) -> pb.BaseCommand:
    command = _BASE(type=_BASE.PRODUCER)
    out = command.producer
    out.topic, out.producer_id, out.request_id = topic, producer_id, request_id
    if producer_name is not None:
        out.producer_name = producer_name
    return command


def send(
    producer_id: int,
    sequence_id: int,
    num_messages: int = 1,
    highest_sequence_id: int | None = None,
) -> pb.BaseCommand:
    command = _BASE(type=_BASE.SEND)
    out = command.send
    out.producer_id, out.sequence_id, out.num_messages = producer_id, sequence_id, num_messages
    if highest_sequence_id is not None:
        out.highest_sequence_id = highest_sequence_id
    return command


def close_producer(producer_id: int, request_id: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.CLOSE_PRODUCER)
    command.close_producer.producer_id = producer_id
    command.close_producer.request_id = request_id
    return command


def subscribe(
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    sub_type: pb.CommandSubscribe.SubType = pb.CommandSubscribe.Exclusive,
    initial_position: pb.CommandSubscribe.InitialPosition = pb.CommandSubscribe.Latest,
    consumer_name: str | None = None,
    priority_level: int | None = None,
    durable: bool | None = None,
    start: Position | None = None,
    key_shared: pb.KeySharedMeta | None = None,
) -> pb.BaseCommand:
    command = _BASE(type=_BASE.SUBSCRIBE)
    out = command.subscribe
    out.topic, out.subscription, out.subType = topic, subscription, sub_type
    out.consumer_id, out.request_id = consumer_id, request_id
    out.initialPosition = initial_position
    if consumer_name is not None:
        out.consumer_name = consumer_name
    if priority_level is not None:
        out.priority_level = priority_level
    if durable is not None:
        out.durable = durable
    if start is not None:
        out.start_message_id.CopyFrom(message_id(start))
    if key_shared is not None:
        out.keySharedMeta.CopyFrom(key_shared)
    return command


def flow(consumer_id: int, permits: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.FLOW)
    command.flow.consumer_id, command.flow.messagePermits = consumer_id, permits
    return command


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


def close_consumer(consumer_id: int, request_id: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.CLOSE_CONSUMER)
    command.close_consumer.consumer_id = consumer_id
    command.close_consumer.request_id = request_id
    return command


def unsubscribe(consumer_id: int, request_id: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.UNSUBSCRIBE)
    command.unsubscribe.consumer_id = consumer_id
    command.unsubscribe.request_id = request_id
    return command


def message_id(position: Position) -> pb.MessageIdData:
    """A message id as clients send it (``-1`` as uint64, like Pulsar's signed longs)."""
    return pb.MessageIdData(
        ledgerId=position.ledger_id & _U64_MASK, entryId=position.entry_id & _U64_MASK
    )
