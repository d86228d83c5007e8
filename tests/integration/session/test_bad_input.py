"""Bad input gets a clear answer and never disturbs other clients."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pulsar
import pytest

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import encode_message, encode_payload_command
from harness.broker_process import BrokerProcess
from harness.raw_client import RawConnection

RECEIVE_MS = 10_000


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawConnection]:
    connection = RawConnection("127.0.0.1", broker.port)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def healthy(client: pulsar.Client, topic: str) -> Iterator[tuple[pulsar.Producer, pulsar.Consumer]]:
    consumer = client.subscribe(topic, "healthy", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    assert consumer.receive(RECEIVE_MS).data() == b"before"
    yield producer, consumer
    producer.send(b"after")
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == b"after"


def _producer(raw: RawConnection, topic: str, producer_id: int = 1) -> str:
    command = pb.BaseCommand(type=pb.BaseCommand.PRODUCER)
    command.producer.topic = topic
    command.producer.producer_id = producer_id
    command.producer.request_id = 100 + producer_id
    raw.send(command)
    frame = raw.expect(pb.BaseCommand.PRODUCER_SUCCESS)
    return frame.command.producer_success.producer_name


def _send_frame(producer_id: int, sequence_id: int, block: bytes) -> bytes:
    command = pb.BaseCommand(type=pb.BaseCommand.SEND)
    command.send.producer_id = producer_id
    command.send.sequence_id = sequence_id
    command.send.num_messages = 1
    return encode_payload_command(command, block)


def _message(producer_name: str, sequence_id: int, payload: bytes) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name=producer_name, sequence_id=sequence_id, publish_time=1_700_000_000_000
    )
    return encode_message(metadata, payload)


def test_frame_over_the_maximum_size_closes_only_that_connection(
    raw: RawConnection, healthy: object
) -> None:
    connected = raw.connect()
    too_big = connected.max_message_size + 1024 * 1024
    raw.send_bytes(struct.pack(">II", too_big, 10) + b"\x00" * 100)
    assert raw.is_closed_by_peer()


def test_garbage_bytes_close_only_that_connection(raw: RawConnection, healthy: object) -> None:
    raw.connect()
    raw.send_bytes(struct.pack(">II", 12, 8) + b"\xff" * 8)
    assert raw.is_closed_by_peer()


def test_garbage_before_connect(raw: RawConnection, healthy: object) -> None:
    raw.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert raw.is_closed_by_peer()


def test_unsupported_command_gets_an_error_and_the_connection_lives(
    raw: RawConnection, healthy: object
) -> None:
    raw.connect()
    command = pb.BaseCommand(type=pb.BaseCommand.END_TXN_RESPONSE)
    command.endTxnResponse.request_id = 7
    raw.send(command)
    error = raw.expect(pb.BaseCommand.ERROR).command.error
    assert error.request_id == 7
    assert "not supported" in error.message
    raw.send(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
    raw.expect(pb.BaseCommand.PONG)


def test_a_transaction_request_is_refused_in_its_own_response_while_transactions_are_off(
    raw: RawConnection, healthy: object
) -> None:
    """The clients match a coordinator's answer by its response type: the refusal comes
    in NEW_TXN_RESPONSE, with Pulsar's message."""
    raw.connect()
    command = pb.BaseCommand(type=pb.BaseCommand.NEW_TXN)
    command.newTxn.request_id = 7
    command.newTxn.tc_id = 0
    raw.send(command)
    answer = raw.expect(pb.BaseCommand.NEW_TXN_RESPONSE).command.newTxnResponse
    assert (answer.request_id, answer.error) == (7, pb.NotAllowedError)
    assert answer.message == "The broker doesn't enable the transaction coordinator"
    raw.send(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
    raw.expect(pb.BaseCommand.PONG)


def test_bad_checksum_is_refused_and_nothing_is_stored(
    raw: RawConnection, healthy: tuple[pulsar.Producer, pulsar.Consumer], topic: str
) -> None:
    raw.connect()
    name = _producer(raw, topic)
    block = bytearray(_message(name, 0, b"corrupted"))
    block[-1] ^= 0xFF  # flip payload bits after the checksum was computed
    raw.send_bytes(_send_frame(1, 0, bytes(block)))
    error = raw.expect(pb.BaseCommand.SEND_ERROR).command.send_error
    assert error.error == pb.ChecksumError
    raw.send_bytes(_send_frame(1, 1, _message(name, 1, b"fine")))
    receipt = raw.expect(pb.BaseCommand.SEND_RECEIPT).command.send_receipt
    assert receipt.sequence_id == 1
    _, consumer = healthy
    assert consumer.receive(RECEIVE_MS).data() == b"fine"


def test_commands_for_unknown_ids_get_clear_errors(raw: RawConnection, healthy: object) -> None:
    raw.connect()
    raw.send_bytes(_send_frame(99, 0, _message("nobody", 0, b"x")))
    error = raw.expect(pb.BaseCommand.SEND_ERROR).command.send_error
    assert "no producer with id 99" in error.message
    flow = pb.BaseCommand(type=pb.BaseCommand.FLOW)
    flow.flow.consumer_id = 42
    flow.flow.messagePermits = 10
    raw.send(flow)
    assert "no consumer with id 42" in raw.expect(pb.BaseCommand.ERROR).command.error.message
    raw.send(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
    raw.expect(pb.BaseCommand.PONG)


def test_producer_name_in_use_is_refused(raw: RawConnection, topic: str) -> None:
    raw.connect()
    command = pb.BaseCommand(type=pb.BaseCommand.PRODUCER)
    command.producer.topic = topic
    command.producer.producer_id = 1
    command.producer.request_id = 1
    command.producer.producer_name = "same-name"
    raw.send(command)
    raw.expect(pb.BaseCommand.PRODUCER_SUCCESS)
    command.producer.producer_id = 2
    command.producer.request_id = 2
    raw.send(command)
    error = raw.expect(pb.BaseCommand.ERROR).command.error
    assert error.error == pb.ProducerBusy


def test_command_before_connect_closes(raw: RawConnection) -> None:
    raw.send(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
    assert raw.is_closed_by_peer()
