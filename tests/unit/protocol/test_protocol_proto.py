"""The generated module matches the published protocol: numbers, enum values, defaults."""

from __future__ import annotations

import pytest

from dedup_broker.protocol import pulsar_api_pb2 as pb


def _numbers(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_base_command_type_enum_is_complete() -> None:
    expected = list(range(2, 41)) + list(range(50, 69))
    assert sorted(pb.BaseCommand.Type.values()) == expected
    assert pb.BaseCommand.Type.Value("TOPIC_MIGRATED") == 68
    assert pb.BaseCommand.Type.Value("GET_OR_CREATE_SCHEMA_RESPONSE") == 40
    assert pb.BaseCommand.Type.Value("ACK_RESPONSE") == 38
    assert pb.BaseCommand.Type.Value("PING") == 18


def test_every_command_type_has_its_field_with_the_same_number() -> None:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    for value in pb.BaseCommand.Type.values():
        assert value in fields, pb.BaseCommand.Type.Name(value)
        assert fields[value].message_type is not None


def test_server_error_enum_is_complete() -> None:
    assert sorted(pb.ServerError.values()) == list(range(26))
    assert pb.ServerError.Value("ServiceNotReady") == 6
    assert pb.ServerError.Value("ChecksumError") == 9
    assert pb.ServerError.Value("ProducerFenced") == 25


def test_message_metadata_field_numbers() -> None:
    assert _numbers(pb.MessageMetadata) == {
        "producer_name": 1,
        "sequence_id": 2,
        "publish_time": 3,
        "properties": 4,
        "replicated_from": 5,
        "partition_key": 6,
        "replicate_to": 7,
        "compression": 8,
        "uncompressed_size": 9,
        "num_messages_in_batch": 11,
        "event_time": 12,
        "encryption_keys": 13,
        "encryption_algo": 14,
        "encryption_param": 15,
        "schema_version": 16,
        "partition_key_b64_encoded": 17,
        "ordering_key": 18,
        "deliver_at_time": 19,
        "marker_type": 20,
        "txnid_least_bits": 22,
        "txnid_most_bits": 23,
        "highest_sequence_id": 24,
        "null_value": 25,
        "uuid": 26,
        "num_chunks_from_msg": 27,
        "total_chunk_msg_size": 28,
        "chunk_id": 29,
        "null_partition_key": 30,
    }


def test_single_message_metadata_field_numbers() -> None:
    assert _numbers(pb.SingleMessageMetadata) == {
        "properties": 1,
        "partition_key": 2,
        "payload_size": 3,
        "compacted_out": 4,
        "event_time": 5,
        "partition_key_b64_encoded": 6,
        "ordering_key": 7,
        "sequence_id": 8,
        "null_value": 9,
        "null_partition_key": 10,
    }


def test_subscribe_field_numbers_and_enums() -> None:
    numbers = _numbers(pb.CommandSubscribe)
    assert numbers["durable"] == 8
    assert numbers["start_message_id"] == 9
    assert numbers["initialPosition"] == 13
    assert numbers["force_topic_creation"] == 15
    assert numbers["keySharedMeta"] == 17
    assert numbers["subscription_properties"] == 18
    assert numbers["consumer_epoch"] == 19
    assert pb.CommandSubscribe.SubType.Value("Key_Shared") == 3
    assert pb.CommandSubscribe.InitialPosition.Value("Earliest") == 1
    assert _numbers(pb.KeySharedMeta) == {
        "keySharedMode": 1,
        "hashRanges": 3,
        "allowOutOfOrderDelivery": 4,
    }


def test_ack_field_numbers() -> None:
    assert _numbers(pb.CommandAck) == {
        "consumer_id": 1,
        "ack_type": 2,
        "message_id": 3,
        "validation_error": 4,
        "properties": 5,
        "txnid_least_bits": 6,
        "txnid_most_bits": 7,
        "request_id": 8,
    }
    assert pb.CommandAck.ValidationError.Value("DecryptionError") == 4


@pytest.mark.parametrize(
    ("message", "field", "default"),
    [
        (pb.MessageIdData, "partition", -1),
        (pb.MessageIdData, "batch_index", -1),
        (pb.CommandSubscribe, "durable", True),
        (pb.CommandSubscribe, "force_topic_creation", True),
        (pb.CommandProducerSuccess, "last_sequence_id", -1),
        (pb.CommandProducerSuccess, "producer_ready", True),
        (pb.CommandProducer, "user_provided_producer_name", True),
        (pb.CommandSend, "num_messages", 1),
        (pb.MessageMetadata, "num_messages_in_batch", 1),
        (pb.CommandPartitionedTopicMetadata, "metadata_auto_creation_enabled", True),
        (pb.CommandGetTopicsOfNamespaceResponse, "changed", True),
    ],
)
def test_defaults_follow_the_spec(message: type, field: str, default: object) -> None:
    assert getattr(message(), field) == default


def test_protocol_and_compression_enums() -> None:
    assert max(pb.ProtocolVersion.values()) == 21
    assert [pb.CompressionType.Name(v) for v in range(5)] == [
        "NONE",
        "LZ4",
        "ZLIB",
        "ZSTD",
        "SNAPPY",
    ]
    assert pb.ProducerAccessMode.Value("ExclusiveWithFencing") == 3


def test_known_bytes_decode() -> None:
    # SEND{producer_id=1, sequence_id=300, num_messages=3} wrapped in BaseCommand(type=6).
    raw = bytes.fromhex("0806" + "3207" + "0801" + "10ac02" + "1803")
    cmd = pb.BaseCommand()
    cmd.ParseFromString(raw)
    assert cmd.type == pb.BaseCommand.SEND
    assert (cmd.send.producer_id, cmd.send.sequence_id, cmd.send.num_messages) == (1, 300, 3)
    assert cmd.SerializeToString() == raw
