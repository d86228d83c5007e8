"""Command builders and inspection helpers."""

from __future__ import annotations

import pytest

from dedup_broker.protocol import commands as c
from dedup_broker.protocol import pulsar_api_pb2 as pb


def test_command_name() -> None:
    assert c.command_name(c.ping()) == "PING"
    assert c.command_name(c.send_receipt(1, 2, 3, 4)) == "SEND_RECEIPT"
    assert c.command_name(pb.BaseCommand()) == "UNKNOWN"


def test_request_id_of_request_commands() -> None:
    lookup = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    lookup.lookupTopic.topic = "t"
    lookup.lookupTopic.request_id = 31
    assert c.request_id_of(lookup) == 31

    txn = pb.BaseCommand(type=pb.BaseCommand.NEW_TXN)
    txn.newTxn.request_id = 32
    assert c.request_id_of(txn) == 32

    ack = pb.BaseCommand(type=pb.BaseCommand.ACK)
    ack.ack.consumer_id = 1
    ack.ack.ack_type = pb.CommandAck.Individual
    assert c.request_id_of(ack) is None  # optional and absent
    ack.ack.request_id = 33
    assert c.request_id_of(ack) == 33


def test_request_id_of_commands_without_one() -> None:
    assert c.request_id_of(c.ping()) is None
    send = pb.BaseCommand(type=pb.BaseCommand.SEND)
    send.send.producer_id = 1
    send.send.sequence_id = 2
    assert c.request_id_of(send) is None
    # type says LOOKUP but the body is missing
    assert c.request_id_of(pb.BaseCommand(type=pb.BaseCommand.LOOKUP)) is None


def test_sub_command() -> None:
    cmd = c.success(5)
    assert c.sub_command(cmd) is cmd.success
    assert c.sub_command(pb.BaseCommand()) is None


def test_duplicate_receipt_carries_minus_one() -> None:
    receipt = c.send_receipt(3, 9, -1, -1).send_receipt
    assert receipt.message_id.ledgerId == 2**64 - 1
    assert c.as_signed64(receipt.message_id.ledgerId) == -1
    assert c.as_signed64(receipt.message_id.entryId) == -1
    assert not receipt.HasField("highest_sequence_id")
    assert c.as_signed64(5) == 5


def test_send_receipt_fields() -> None:
    receipt = c.send_receipt(3, 9, 100, 7, highest_sequence_id=12).send_receipt
    assert (receipt.producer_id, receipt.sequence_id) == (3, 9)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (100, 7)
    assert receipt.highest_sequence_id == 12


def test_connected_fields() -> None:
    cmd = c.connected("srv", 20, 1024, pb.FeatureFlags(supports_broker_entry_metadata=True))
    assert cmd.type == pb.BaseCommand.CONNECTED
    assert cmd.connected.server_version == "srv"
    assert cmd.connected.protocol_version == 20
    assert cmd.connected.max_message_size == 1024
    assert cmd.connected.feature_flags.supports_broker_entry_metadata
    assert not c.connected("srv", 20, 1024).connected.HasField("feature_flags")


def test_producer_success_fields() -> None:
    out = c.producer_success(4, "p-1").producer_success
    assert (out.request_id, out.producer_name, out.last_sequence_id) == (4, "p-1", -1)
    # Set (empty) even without a schema: the Java client requires the field.
    assert out.HasField("schema_version") and out.schema_version == b""
    assert not out.HasField("topic_epoch")
    assert out.producer_ready
    out = c.producer_success(4, "p-1", 99, b"\x01", 2, producer_ready=False).producer_success
    assert (out.last_sequence_id, out.schema_version, out.topic_epoch) == (99, b"\x01", 2)
    assert not out.producer_ready


def test_lookup_response_variants() -> None:
    ok = c.lookup_response(1, "pulsar://h:6650").lookupTopicResponse
    assert ok.response == pb.CommandLookupTopicResponse.Connect
    assert ok.brokerServiceUrl == "pulsar://h:6650"
    assert ok.authoritative
    assert ok.proxy_through_service_url
    redirect = c.lookup_response(2, "pulsar://o:6650", response="Redirect").lookupTopicResponse
    assert redirect.response == pb.CommandLookupTopicResponse.Redirect
    failed = c.lookup_response(3, None, error=pb.ServiceNotReady, message="m")
    out = failed.lookupTopicResponse
    assert out.response == pb.CommandLookupTopicResponse.Failed
    assert (out.error, out.message) == (pb.ServiceNotReady, "m")
    assert not out.HasField("brokerServiceUrl")
    with pytest.raises(ValueError, match="lookup response"):
        c.lookup_response(4, "u", response="Elsewhere")


def test_partitioned_metadata_response_variants() -> None:
    ok = c.partitioned_metadata_response(1, 3).partitionMetadataResponse
    assert (ok.response, ok.partitions) == (pb.CommandPartitionedTopicMetadataResponse.Success, 3)
    failed = c.partitioned_metadata_response(2, error=pb.TopicNotFound, message="none")
    out = failed.partitionMetadataResponse
    assert out.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    assert (out.error, out.message) == (pb.TopicNotFound, "none")


def test_message_fields() -> None:
    out = c.message(1, 2, 3).message
    assert (out.consumer_id, out.message_id.ledgerId, out.message_id.entryId) == (1, 2, 3)
    assert not out.HasField("redelivery_count")
    assert not out.message_id.HasField("partition")
    out = c.message(1, 2, 3, redelivery_count=4, partition=5, ack_set=[-2]).message
    assert (out.redelivery_count, out.message_id.partition, list(out.ack_set)) == (4, 5, [-2])


def test_close_commands_use_request_id_minus_one() -> None:
    assert c.close_producer(7).close_producer.request_id == 2**64 - 1
    assert c.close_consumer(8).close_consumer.request_id == 2**64 - 1
    out = c.close_consumer(8, 3, "pulsar://x:1").close_consumer
    assert (out.request_id, out.assignedBrokerServiceUrl) == (3, "pulsar://x:1")


def test_get_last_message_id_response_fields() -> None:
    out = c.get_last_message_id_response(1, 10, 20).getLastMessageIdResponse
    assert (out.last_message_id.ledgerId, out.last_message_id.entryId) == (10, 20)
    assert out.last_message_id.batch_index == -1
    assert not out.HasField("consumer_mark_delete_position")
    out = c.get_last_message_id_response(1, -1, -1, mark_delete=(9, 8)).getLastMessageIdResponse
    assert c.as_signed64(out.last_message_id.ledgerId) == -1
    assert (
        out.consumer_mark_delete_position.ledgerId,
        out.consumer_mark_delete_position.entryId,
    ) == (9, 8)


def test_schema_and_stats_responses() -> None:
    out = c.get_schema_response(1, error=pb.TopicNotFound, message="no schema").getSchemaResponse
    assert (out.error_code, out.error_message) == (pb.TopicNotFound, "no schema")
    assert not out.HasField("schema")
    out2 = c.get_or_create_schema_response(2, b"\x00\x00").getOrCreateSchemaResponse
    assert out2.schema_version == b"\x00\x00"
    stats = c.consumer_stats_response(
        3, consumer_name="n", subscription_type="Failover", available_permits=10, msg_backlog=2
    ).consumerStatsResponse
    assert (stats.consumerName, stats.type, stats.availablePermits, stats.msgBacklog) == (
        "n",
        "Failover",
        10,
        2,
    )
    assert not stats.HasField("msgRateOut")


def test_topics_and_consumer_events() -> None:
    out = c.get_topics_of_namespace_response(1, ["a", "b"]).getTopicsOfNamespaceResponse
    assert list(out.topics) == ["a", "b"]
    assert not out.HasField("filtered")
    assert c.active_consumer_change(3, True).active_consumer_change.is_active
    assert c.reached_end_of_topic(4).reachedEndOfTopic.consumer_id == 4
    assert c.ack_response(5, 6).ackResponse.request_id == 6
