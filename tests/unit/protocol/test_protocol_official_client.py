"""The codec against the official Pulsar client's real bytes, over a loopback socket.

A minimal in-process broker (this codec plus canned answers) lets ``pulsar.Client``
connect, create producers, publish a batch of three messages and a single message,
then consume both entries back. The test checks what the client sent, decoded by the
codec, and what the client made of the frames the codec encoded.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pulsar
import pytest

from dedup_broker.protocol import commands as c
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_sequence_range, is_batch, split_batch
from dedup_broker.protocol.framing import (
    Frame,
    FrameDecoder,
    add_broker_entry_metadata,
    encode_command,
    encode_payload_command,
    parse_message,
)

LEDGER_ID = 7
TOPIC = "persistent://public/default/codec-check"
BATCH_CODECS = {
    "NONE": pb.NONE,
    "LZ4": pb.LZ4,
    "ZLib": pb.ZLIB,
    "ZSTD": pb.ZSTD,
    "SNAPPY": pb.SNAPPY,
}

pytestmark = pytest.mark.timeout(60)


class FakeBroker:
    """Answers just enough commands for a producer and a consumer; records every frame."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.entries: list[bytes] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = future.result(timeout=5)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for writer in self._writers:
                writer.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                self.frames.append(frame)
                for out in self._answer(frame):
                    writer.write(out)
            await writer.drain()

    def _answer(self, frame: Frame) -> list[bytes]:
        cmd = frame.command
        kind = pb.BaseCommand
        if cmd.type == kind.CONNECT:
            return [encode_command(c.connected("fake", 20, 5 * 1024 * 1024))]
        if cmd.type == kind.PARTITIONED_METADATA:
            return [
                encode_command(c.partitioned_metadata_response(cmd.partitionMetadata.request_id))
            ]
        if cmd.type == kind.LOOKUP:
            url = f"pulsar://127.0.0.1:{self.port}"
            return [encode_command(c.lookup_response(cmd.lookupTopic.request_id, url))]
        if cmd.type == kind.PRODUCER:
            request = cmd.producer
            return [encode_command(c.producer_success(request.request_id, request.producer_name))]
        if cmd.type == kind.SEND:
            assert frame.payload is not None
            self.entries.append(frame.payload)
            entry_id = len(self.entries) - 1
            return [
                encode_command(
                    c.send_receipt(cmd.send.producer_id, cmd.send.sequence_id, LEDGER_ID, entry_id)
                )
            ]
        if cmd.type == kind.SUBSCRIBE:
            return [encode_command(c.success(cmd.subscribe.request_id))]
        if cmd.type == kind.FLOW:
            return self._deliver(cmd.flow.consumer_id)
        if cmd.type in (kind.CLOSE_PRODUCER, kind.CLOSE_CONSUMER):
            sub = c.sub_command(cmd)
            return [encode_command(c.success(getattr(sub, "request_id")))]  # noqa: B009
        if cmd.type == kind.PING:
            return [encode_command(c.pong())]
        return []

    def _deliver(self, consumer_id: int) -> list[bytes]:
        frames = []
        for entry_id, block in enumerate(self.entries):
            if entry_id == 1:  # exercise the broker-entry-metadata prefix too
                block = add_broker_entry_metadata(
                    block, pb.BrokerEntryMetadata(broker_timestamp=1, index=entry_id)
                )
            frames.append(
                encode_payload_command(c.message(consumer_id, LEDGER_ID, entry_id), block)
            )
        self.entries = []
        return frames

    def of_type(self, command_type: int) -> list[Frame]:
        return [f for f in self.frames if f.command.type == command_type]


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    fake = FakeBroker()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def _client(port: int) -> pulsar.Client:
    return pulsar.Client(
        f"pulsar://127.0.0.1:{port}",
        operation_timeout_seconds=5,
        connection_timeout_ms=3000,
        logger=logging.getLogger("pulsar-client"),
    )


@pytest.mark.parametrize("codec", sorted(BATCH_CODECS))
def test_official_client_bytes(broker: FakeBroker, codec: str) -> None:
    compression = getattr(pulsar.CompressionType, codec)
    client = _client(broker.port)
    try:
        batching = client.create_producer(
            TOPIC,
            producer_name="prod-batch",
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=5000,
            compression_type=compression,
        )
        for i in range(3):
            batching.send_async(
                f"batched-{i}-".encode() * 10, None, properties={"i": str(i)}, partition_key=f"k{i}"
            )
        batching.flush()
        single = client.create_producer(
            TOPIC, producer_name="prod-single", batching_enabled=False, compression_type=compression
        )
        single.send(b"the single one", properties={"kind": "single"}, sequence_id=42)
        sent = list(broker.entries)

        consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
        received = [consumer.receive(timeout_millis=5000) for _ in range(4)]
        consumer.close()
        batching.close()
        single.close()
    finally:
        client.close()

    # --- what the client sent, decoded by the codec ---
    connect = broker.of_type(pb.BaseCommand.CONNECT)[0].command.connect
    assert connect.client_version.startswith("Pulsar-CPP")
    assert connect.protocol_version == 20
    assert connect.feature_flags.supports_broker_entry_metadata

    producers = [f.command.producer for f in broker.of_type(pb.BaseCommand.PRODUCER)]
    assert [(p.topic, p.producer_name, p.producer_id) for p in producers] == [
        (TOPIC, "prod-batch", 0),
        (TOPIC, "prod-single", 1),
    ]

    sends = broker.of_type(pb.BaseCommand.SEND)
    assert [(f.command.send.producer_id, f.command.send.sequence_id) for f in sends] == [
        (0, 0),
        (1, 42),
    ]
    assert sends[0].command.send.num_messages == 3
    assert [f.payload for f in sends] == sent

    batch = parse_message(sent[0])
    assert batch.checksum_present and batch.checksum_valid
    assert batch.metadata.producer_name == "prod-batch"
    assert batch.metadata.compression == BATCH_CODECS[codec]
    assert is_batch(batch.metadata)
    assert batch.metadata.num_messages_in_batch == 3
    # The C++ client leaves highest_sequence_id unset and numbers each message instead.
    assert not batch.metadata.HasField("highest_sequence_id")
    messages = split_batch(batch.metadata, batch.payload)
    assert [m.payload for m in messages] == [f"batched-{i}-".encode() * 10 for i in range(3)]
    assert [m.metadata.sequence_id for m in messages] == [0, 1, 2]
    assert [m.metadata.partition_key for m in messages] == ["k0", "k1", "k2"]
    assert [[(p.key, p.value) for p in m.metadata.properties] for m in messages] == [
        [("i", "0")],
        [("i", "1")],
        [("i", "2")],
    ]
    assert batch_sequence_range(batch.metadata, batch.payload) == (0, 2)

    lone = parse_message(sent[1])
    assert lone.checksum_valid
    assert (lone.metadata.producer_name, lone.metadata.sequence_id) == ("prod-single", 42)
    assert not is_batch(lone.metadata)
    assert [(p.key, p.value) for p in lone.metadata.properties] == [("kind", "single")]
    assert [m.payload for m in split_batch(lone.metadata, lone.payload)] == [b"the single one"]
    assert batch_sequence_range(lone.metadata, lone.payload) == (42, 42)

    # --- what the client made of the MESSAGE frames the codec encoded ---
    assert [m.data() for m in received] == [
        *(f"batched-{i}-".encode() * 10 for i in range(3)),
        b"the single one",
    ]
    assert [m.properties() for m in received] == [
        {"i": "0"},
        {"i": "1"},
        {"i": "2"},
        {"kind": "single"},
    ]
    assert [m.partition_key() for m in received[:3]] == ["k0", "k1", "k2"]
    ids = [m.message_id() for m in received]
    assert [(i.ledger_id(), i.entry_id(), i.batch_index()) for i in ids] == [
        (LEDGER_ID, 0, 0),
        (LEDGER_ID, 0, 1),
        (LEDGER_ID, 0, 2),
        (LEDGER_ID, 1, -1),
    ]
    flows = broker.of_type(pb.BaseCommand.FLOW)
    assert flows and flows[0].command.flow.messagePermits > 0
