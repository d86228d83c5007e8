"""Builders for the commands a client sends (the broker's answers are in ``commands``).

Each returns a complete ``BaseCommand``. Used by the Spark connectors' own client and by
the tests that speak the protocol byte for byte. A message id is anything with a
``ledger_id`` and an ``entry_id``; ``-1`` goes out as uint64 two's complement, as
Pulsar's signed longs do.
"""

from __future__ import annotations

from typing import Protocol

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.commands import CURRENT_PROTOCOL_VERSION

_BASE = pb.BaseCommand
_U64_MASK = (1 << 64) - 1


class EntryPosition(Protocol):
    """A position in a topic's log: the storage's ``Position``, a connector's, ..."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def entry_id(self) -> int: ...


def connect(
    protocol_version: int = CURRENT_PROTOCOL_VERSION,
    client_version: str = "dedup-broker",
    auth_method: str = "",
    auth_data: bytes = b"",
    proxy_to_broker_url: str | None = None,
    supports_auth_refresh: bool = False,
) -> pb.BaseCommand:
    command = _BASE(type=_BASE.CONNECT)
    out = command.connect
    out.client_version = client_version
    out.protocol_version = protocol_version
    if auth_method:
        out.auth_method_name = auth_method
        out.auth_data = auth_data
    if proxy_to_broker_url is not None:
        out.proxy_to_broker_url = proxy_to_broker_url
    if supports_auth_refresh:
        out.feature_flags.supports_auth_refresh = True
    return command


def auth_response(
    auth_method: str,
    auth_data: bytes,
    client_version: str = "dedup-broker",
    protocol_version: int = CURRENT_PROTOCOL_VERSION,
) -> pb.BaseCommand:
    """AUTH_RESPONSE: the answer to AUTH_CHALLENGE, with current credentials."""
    command = _BASE(type=_BASE.AUTH_RESPONSE)
    out = command.authResponse
    out.client_version = client_version
    out.protocol_version = protocol_version
    out.response.auth_method_name = auth_method
    out.response.auth_data = auth_data
    return command


def partitioned_metadata(topic: str, request_id: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.PARTITIONED_METADATA)
    command.partitionMetadata.topic = topic
    command.partitionMetadata.request_id = request_id
    return command


def lookup(topic: str, request_id: int, authoritative: bool = False) -> pb.BaseCommand:
    command = _BASE(type=_BASE.LOOKUP)
    out = command.lookupTopic
    out.topic, out.request_id, out.authoritative = topic, request_id, authoritative
    return command


def producer(
    topic: str,
    producer_id: int,
    request_id: int,
    producer_name: str | None = None,
    user_provided_name: bool = True,
    epoch: int = 0,
) -> pb.BaseCommand:
    """PRODUCER; a name the broker chose earlier goes back with ``user_provided_name``
    false, and ``epoch`` counts the producer's reconnections."""
    command = _BASE(type=_BASE.PRODUCER)
    out = command.producer
    out.topic, out.producer_id, out.request_id = topic, producer_id, request_id
    if producer_name is not None:
        out.producer_name = producer_name
    if not user_provided_name:
        out.user_provided_producer_name = False
    if epoch:
        out.epoch = epoch
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
    start: EntryPosition | None = None,
    key_shared: pb.KeySharedMeta | None = None,
) -> pb.BaseCommand:
    """SUBSCRIBE; ``start`` is a reader's first entry (inclusively)."""
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


def close_consumer(consumer_id: int, request_id: int) -> pb.BaseCommand:
    command = _BASE(type=_BASE.CLOSE_CONSUMER)
    command.close_consumer.consumer_id = consumer_id
    command.close_consumer.request_id = request_id
    return command


def message_id(position: EntryPosition) -> pb.MessageIdData:
    """A message id as clients send it (``-1`` as uint64, like Pulsar's signed longs)."""
    return pb.MessageIdData(
        ledgerId=position.ledger_id & _U64_MASK, entryId=position.entry_id & _U64_MASK
    )
