"""Builders for the commands the broker sends, and helpers to inspect any BaseCommand.

Every builder returns a complete ``BaseCommand`` (``type`` set, the matching sub-command
filled in), ready for :func:`dedup_broker.protocol.framing.encode_command`. Keyword names
follow the proto fields, so reading a builder call is reading the wire message.

Message ids are uint64 on the wire but Pulsar uses ``-1`` for "no position" (for
instance a SEND_RECEIPT for a duplicate carries ``-1:-1``); builders take Python ints
and store negative values in two's complement, exactly as Pulsar's own broker does, so
clients read them back as ``-1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from google.protobuf.message import Message

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.schema_commands import (
    get_or_create_schema_response as get_or_create_schema_response,
)
from dedup_broker.protocol.schema_commands import get_schema_response as get_schema_response

BaseCommand = pb.BaseCommand
Type = pb.BaseCommand.Type

#: The newest protocol version this codec understands.
CURRENT_PROTOCOL_VERSION: int = max(pb.ProtocolVersion.values())

_U64_MASK = 0xFFFF_FFFF_FFFF_FFFF

# In BaseCommand the sub-command for type N is field number N; this table is that rule,
# checked once here so callers never have to trust it.
_FIELD_BY_TYPE: dict[int, str] = {
    value: pb.BaseCommand.DESCRIPTOR.fields_by_number[value].name
    for value in pb.BaseCommand.Type.values()
    if value in pb.BaseCommand.DESCRIPTOR.fields_by_number
}

_LOOKUP_TYPES = {
    "Redirect": pb.CommandLookupTopicResponse.Redirect,
    "Connect": pb.CommandLookupTopicResponse.Connect,
    "Failed": pb.CommandLookupTopicResponse.Failed,
}


def _u64(value: int) -> int:
    """Two's complement for negative ids, so ``-1`` survives a uint64 field."""
    return value & _U64_MASK


def as_signed64(value: int) -> int:
    """Reads a uint64 id field back as Pulsar's signed long (``2**64 - 1`` -> ``-1``)."""
    return value - (1 << 64) if value >= (1 << 63) else value


# ---------------------------------------------------------------------------------------
# Inspection
# ---------------------------------------------------------------------------------------


def sub_command_field(command_type: int) -> str | None:
    """The name of the BaseCommand field carrying the sub-command of ``command_type``."""
    return _FIELD_BY_TYPE.get(command_type)


def sub_command(cmd: pb.BaseCommand) -> Message | None:
    """The sub-command matching ``cmd.type``, or None when absent or the type is unset."""
    if not cmd.HasField("type"):
        return None
    field = _FIELD_BY_TYPE.get(cmd.type)
    if field is None or not cmd.HasField(field):
        return None
    sub: Message = getattr(cmd, field)
    return sub


def command_name(cmd: pb.BaseCommand) -> str:
    """The command's type name (``"SEND"``) for logs; ``"UNKNOWN"`` when it has none."""
    if not cmd.HasField("type"):
        return "UNKNOWN"
    return pb.BaseCommand.Type.Name(cmd.type)


def request_id_of(cmd: pb.BaseCommand) -> int | None:
    """The request id the sub-command carries, so even a refused request gets its answer."""
    sub = sub_command(cmd)
    if sub is None or "request_id" not in sub.DESCRIPTOR.fields_by_name:
        return None
    if not sub.HasField("request_id"):
        return None
    request_id: int = getattr(sub, "request_id")  # noqa: B009 - any sub-command type
    return request_id


# ---------------------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------------------


def connected(
    server_version: str,
    protocol_version: int,
    max_message_size: int,
    feature_flags: pb.FeatureFlags | None = None,
) -> pb.BaseCommand:
    """CONNECTED: the answer to CONNECT, carrying the negotiated limits."""
    cmd = pb.BaseCommand(type=Type.CONNECTED)
    cmd.connected.server_version = server_version
    cmd.connected.protocol_version = protocol_version
    cmd.connected.max_message_size = max_message_size
    if feature_flags is not None:
        cmd.connected.feature_flags.CopyFrom(feature_flags)
    return cmd


def auth_challenge(method: str, data: bytes, protocol_version: int) -> pb.BaseCommand:
    """AUTH_CHALLENGE: the client must answer AUTH_RESPONSE with fresh credentials."""
    cmd = pb.BaseCommand(type=Type.AUTH_CHALLENGE)
    cmd.authChallenge.challenge.auth_method_name = method
    cmd.authChallenge.challenge.auth_data = data
    cmd.authChallenge.protocol_version = protocol_version
    return cmd


def ping() -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.PING)
    cmd.ping.SetInParent()
    return cmd


def pong() -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.PONG)
    cmd.pong.SetInParent()
    return cmd


# ---------------------------------------------------------------------------------------
# Generic replies
# ---------------------------------------------------------------------------------------


def success(request_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.SUCCESS)
    cmd.success.request_id = _u64(request_id)
    return cmd


def error(request_id: int, error: pb.ServerError, message: str) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.ERROR)
    cmd.error.request_id = _u64(request_id)
    cmd.error.error = error
    cmd.error.message = message
    return cmd


# ---------------------------------------------------------------------------------------
# Lookup
# ---------------------------------------------------------------------------------------


def lookup_response(
    request_id: int,
    broker_service_url: str | None,
    response: str = "Connect",
    authoritative: bool = True,
    proxy_through_service_url: bool = True,
    error: pb.ServerError | None = None,
    message: str | None = None,
    broker_service_url_tls: str | None = None,
) -> pb.BaseCommand:
    """LOOKUP_RESPONSE; ``response`` is ``"Connect"``, ``"Redirect"`` or ``"Failed"``.

    Passing ``error`` makes it a failed lookup whatever ``response`` says. Clients on TLS
    go to ``broker_service_url_tls``, the others to ``broker_service_url``.
    """
    cmd = pb.BaseCommand(type=Type.LOOKUP_RESPONSE)
    out = cmd.lookupTopicResponse
    out.request_id = _u64(request_id)
    if error is not None:
        out.response = pb.CommandLookupTopicResponse.Failed
        out.error = error
        if message is not None:
            out.message = message
        return cmd
    if response not in _LOOKUP_TYPES:
        raise ValueError(f"lookup response must be one of {sorted(_LOOKUP_TYPES)}")
    out.response = _LOOKUP_TYPES[response]
    if broker_service_url is not None:
        out.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        out.brokerServiceUrlTls = broker_service_url_tls
    out.authoritative = authoritative
    out.proxy_through_service_url = proxy_through_service_url
    if message is not None:
        out.message = message
    return cmd


def partitioned_metadata_response(
    request_id: int,
    partitions: int = 0,
    error: pb.ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """PARTITIONED_METADATA_RESPONSE; 0 partitions means a non-partitioned topic."""
    cmd = pb.BaseCommand(type=Type.PARTITIONED_METADATA_RESPONSE)
    out = cmd.partitionMetadataResponse
    out.request_id = _u64(request_id)
    if error is not None:
        out.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        out.error = error
        if message is not None:
            out.message = message
        return cmd
    out.response = pb.CommandPartitionedTopicMetadataResponse.Success
    out.partitions = partitions
    return cmd


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    out = cmd.getTopicsOfNamespaceResponse
    out.request_id = _u64(request_id)
    out.topics.extend(topics)
    if filtered:
        out.filtered = True
    if topics_hash is not None:
        out.topics_hash = topics_hash
    if not changed:
        out.changed = False
    return cmd


def watch_topic_list_success(
    request_id: int, watcher_id: int, topics: Iterable[str], topics_hash: str
) -> pb.BaseCommand:
    """WATCH_TOPIC_LIST_SUCCESS: the watch is set; ``topics`` match its pattern now."""
    cmd = pb.BaseCommand(type=Type.WATCH_TOPIC_LIST_SUCCESS)
    out = cmd.watchTopicListSuccess
    out.request_id = _u64(request_id)
    out.watcher_id = _u64(watcher_id)
    out.topic.extend(topics)
    out.topics_hash = topics_hash
    return cmd


def watch_topic_update(
    watcher_id: int, new_topics: Iterable[str], deleted_topics: Iterable[str], topics_hash: str
) -> pb.BaseCommand:
    """WATCH_TOPIC_UPDATE: topics created or deleted since the last word on the watch."""
    cmd = pb.BaseCommand(type=Type.WATCH_TOPIC_UPDATE)
    out = cmd.watchTopicUpdate
    out.watcher_id = _u64(watcher_id)
    out.new_topics.extend(new_topics)
    out.deleted_topics.extend(deleted_topics)
    out.topics_hash = topics_hash
    return cmd


# ---------------------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------------------


def producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int = -1,
    schema_version: bytes = b"",
    topic_epoch: int | None = None,
    producer_ready: bool = True,
) -> pb.BaseCommand:
    """PRODUCER_SUCCESS; ``last_sequence_id`` is what deduplication persisted (-1: none)."""
    cmd = pb.BaseCommand(type=Type.PRODUCER_SUCCESS)
    out = cmd.producer_success
    out.request_id = _u64(request_id)
    out.producer_name = producer_name
    out.last_sequence_id = last_sequence_id
    # Always present, empty without a schema (as Pulsar sends it): the Java client reads
    # the field unconditionally and fails producer creation when it is absent.
    out.schema_version = schema_version
    if topic_epoch is not None:
        out.topic_epoch = topic_epoch
    out.producer_ready = producer_ready
    return cmd


def send_receipt(
    producer_id: int,
    sequence_id: int,
    ledger_id: int,
    entry_id: int,
    highest_sequence_id: int | None = None,
) -> pb.BaseCommand:
    """SEND_RECEIPT; ``ledger_id = entry_id = -1`` tells the client it was a duplicate."""
    cmd = pb.BaseCommand(type=Type.SEND_RECEIPT)
    out = cmd.send_receipt
    out.producer_id = _u64(producer_id)
    out.sequence_id = _u64(sequence_id)
    out.message_id.ledgerId = _u64(ledger_id)
    out.message_id.entryId = _u64(entry_id)
    if highest_sequence_id is not None:
        out.highest_sequence_id = _u64(highest_sequence_id)
    return cmd


def send_error(
    producer_id: int, sequence_id: int, error: pb.ServerError, message: str
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.SEND_ERROR)
    out = cmd.send_error
    out.producer_id = _u64(producer_id)
    out.sequence_id = _u64(sequence_id)
    out.error = error
    out.message = message
    return cmd


def close_producer(
    producer_id: int,
    request_id: int = -1,
    assigned_broker_service_url: str | None = None,
    assigned_broker_service_url_tls: str | None = None,
) -> pb.BaseCommand:
    """CLOSE_PRODUCER sent by the broker (request id -1, as Pulsar does): reconnect, to
    the assigned broker when one is named (PIP-307)."""
    cmd = pb.BaseCommand(type=Type.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = _u64(producer_id)
    cmd.close_producer.request_id = _u64(request_id)
    if assigned_broker_service_url is not None:
        cmd.close_producer.assignedBrokerServiceUrl = assigned_broker_service_url
    if assigned_broker_service_url_tls is not None:
        cmd.close_producer.assignedBrokerServiceUrlTls = assigned_broker_service_url_tls
    return cmd


# ---------------------------------------------------------------------------------------
# Consumers
# ---------------------------------------------------------------------------------------


def message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int = 0,
    partition: int = -1,
    ack_set: Iterable[int] | None = None,
    consumer_epoch: int | None = None,
) -> pb.BaseCommand:
    """MESSAGE; the entry bytes follow it in the frame (see ``encode_payload_command``)."""
    cmd = pb.BaseCommand(type=Type.MESSAGE)
    out = cmd.message
    out.consumer_id = _u64(consumer_id)
    out.message_id.ledgerId = _u64(ledger_id)
    out.message_id.entryId = _u64(entry_id)
    if partition != -1:
        out.message_id.partition = partition
    if redelivery_count:
        out.redelivery_count = redelivery_count
    if ack_set is not None:
        out.ack_set.extend(ack_set)
    if consumer_epoch is not None:
        out.consumer_epoch = consumer_epoch
    return cmd


def close_consumer(
    consumer_id: int,
    request_id: int = -1,
    assigned_broker_service_url: str | None = None,
    assigned_broker_service_url_tls: str | None = None,
) -> pb.BaseCommand:
    """CLOSE_CONSUMER sent by the broker (request id -1, as Pulsar does): resubscribe, at
    the assigned broker when one is named (PIP-307)."""
    cmd = pb.BaseCommand(type=Type.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = _u64(consumer_id)
    cmd.close_consumer.request_id = _u64(request_id)
    if assigned_broker_service_url is not None:
        cmd.close_consumer.assignedBrokerServiceUrl = assigned_broker_service_url
    if assigned_broker_service_url_tls is not None:
        cmd.close_consumer.assignedBrokerServiceUrlTls = assigned_broker_service_url_tls
    return cmd


def active_consumer_change(consumer_id: int, is_active: bool) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.ACTIVE_CONSUMER_CHANGE)
    cmd.active_consumer_change.consumer_id = _u64(consumer_id)
    cmd.active_consumer_change.is_active = is_active
    return cmd


def reached_end_of_topic(consumer_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=Type.REACHED_END_OF_TOPIC)
    cmd.reachedEndOfTopic.consumer_id = _u64(consumer_id)
    return cmd


def ack_response(
    consumer_id: int,
    request_id: int,
    error: pb.ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """ACK_RESPONSE for clients that asked for ack receipts (ACK with a request id)."""
    cmd = pb.BaseCommand(type=Type.ACK_RESPONSE)
    out = cmd.ackResponse
    out.consumer_id = _u64(consumer_id)
    out.request_id = _u64(request_id)
    if error is not None:
        out.error = error
    if message is not None:
        out.message = message
    return cmd


def get_last_message_id_response(
    request_id: int,
    ledger_id: int,
    entry_id: int,
    batch_index: int = -1,
    partition: int = -1,
    mark_delete: tuple[int, int] | None = None,
) -> pb.BaseCommand:
    """GET_LAST_MESSAGE_ID_RESPONSE; ``mark_delete`` is the cursor's (ledger, entry)."""
    cmd = pb.BaseCommand(type=Type.GET_LAST_MESSAGE_ID_RESPONSE)
    out = cmd.getLastMessageIdResponse
    out.request_id = _u64(request_id)
    out.last_message_id.ledgerId = _u64(ledger_id)
    out.last_message_id.entryId = _u64(entry_id)
    if partition != -1:
        out.last_message_id.partition = partition
    if batch_index != -1:
        out.last_message_id.batch_index = batch_index
    if mark_delete is not None:
        out.consumer_mark_delete_position.ledgerId = _u64(mark_delete[0])
        out.consumer_mark_delete_position.entryId = _u64(mark_delete[1])
    return cmd


def consumer_stats_response(
    request_id: int,
    *,
    error: pb.ServerError | None = None,
    message: str | None = None,
    consumer_name: str | None = None,
    subscription_type: str | None = None,
    address: str | None = None,
    connected_since: str | None = None,
    available_permits: int | None = None,
    unacked_messages: int | None = None,
    msg_backlog: int | None = None,
    blocked_consumer_on_unacked_msgs: bool | None = None,
    msg_rate_out: float | None = None,
    msg_throughput_out: float | None = None,
    msg_rate_redeliver: float | None = None,
    msg_rate_expired: float | None = None,
    message_ack_rate: float | None = None,
) -> pb.BaseCommand:
    """CONSUMER_STATS_RESPONSE; only the statistics given are set.

    ``subscription_type`` is the ``type`` field ("Exclusive", "Shared"...).
    """
    cmd = pb.BaseCommand(type=Type.CONSUMER_STATS_RESPONSE)
    out = cmd.consumerStatsResponse
    out.request_id = _u64(request_id)
    if error is not None:
        out.error_code = error
    values: Mapping[str, str | int | float | bool | None] = {
        "error_message": message,
        "consumerName": consumer_name,
        "type": subscription_type,
        "address": address,
        "connectedSince": connected_since,
        "availablePermits": available_permits,
        "unackedMessages": unacked_messages,
        "msgBacklog": msg_backlog,
        "blockedConsumerOnUnackedMsgs": blocked_consumer_on_unacked_msgs,
        "msgRateOut": msg_rate_out,
        "msgThroughputOut": msg_throughput_out,
        "msgRateRedeliver": msg_rate_redeliver,
        "msgRateExpired": msg_rate_expired,
        "messageAckRate": message_ack_rate,
    }
    for name, value in values.items():
        if value is not None:
            setattr(out, name, value)
    return cmd
