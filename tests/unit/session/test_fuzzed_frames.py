"""Random and mutated frames (Hypothesis): the decoder only ever refuses with a
ProtocolError, and a connection fed garbage neither crashes the broker nor disturbs
another client's producing and consuming."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import FrameDecoder, encode_command, encode_payload_command
from harness import client_commands as client
from harness.memory_broker import MemoryBroker, WireClient, settle

TOPIC = "persistent://public/default/fuzzed"


def lookup(request_id: int) -> pb.BaseCommand:
    command = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    command.lookupTopic.topic, command.lookupTopic.request_id = TOPIC, request_id
    return command


def partitioned_metadata(request_id: int) -> pb.BaseCommand:
    command = pb.BaseCommand(type=pb.BaseCommand.PARTITIONED_METADATA)
    command.partitionMetadata.topic = TOPIC
    command.partitionMetadata.request_id = request_id
    return command


def valid_session() -> bytes:
    """What a well-behaved client sends: the material mutations start from."""
    return b"".join(
        [
            encode_command(client.connect()),
            encode_command(partitioned_metadata(1)),
            encode_command(lookup(2)),
            encode_command(client.producer(TOPIC, 7, 3, "fuzz")),
            encode_payload_command(client.send(7, 0), client.message_block("fuzz", 0, b"m")),
            encode_command(client.subscribe(TOPIC, "s", 9, 4)),
            encode_command(client.flow(9, 10)),
            encode_command(client.close_producer(7, 5)),
            encode_command(commands.ping()),
        ]
    )


SESSION = valid_session()

mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "truncate"]),
    st.integers(min_value=0, max_value=len(SESSION) - 1),
    st.binary(min_size=1, max_size=8),
)


def mutate(data: bytes, mutations: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, where, material in mutations:
        where %= max(len(out), 1)
        if kind == "flip" and out:
            for i, byte in enumerate(material):
                if where + i < len(out):
                    out[where + i] ^= byte or 0xFF
        elif kind == "insert":
            out[where:where] = material
        elif kind == "delete":
            del out[where : where + len(material)]
        else:
            del out[where:]
    return bytes(out)


garbage = st.one_of(
    st.binary(max_size=512),
    st.lists(mutation, min_size=1, max_size=6).map(lambda m: mutate(SESSION, m)),
)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_BROKER = settings(FUZZ, max_examples=60)


@FUZZ
@given(data=garbage, chunk=st.integers(min_value=1, max_value=64))
def test_the_decoder_refuses_only_with_protocol_errors(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(64 * 1024)
    try:
        for start in range(0, len(data), chunk):
            decoder.feed(data[start : start + chunk])
    except ProtocolError:
        pass


@FUZZ_BROKER
@given(data=garbage, chunk=st.integers(min_value=4, max_value=256))
def test_garbage_on_one_connection_leaves_the_others_served(data: bytes, chunk: int) -> None:
    asyncio.run(_one_bad_client(data, chunk))


async def _one_bad_client(data: bytes, chunk: int) -> None:
    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: loop_errors.append(context))
    broker = MemoryBroker()
    good = await broker.client()
    assert _types(await good.exchange(client.producer(TOPIC, 1, 1, "good"))) == [
        pb.BaseCommand.PRODUCER_SUCCESS
    ]
    await good.exchange(client.subscribe(TOPIC, "good", 2, 2))
    await good.exchange(client.flow(2, 100))

    bad = WireClient(broker.listener, 41000)
    for start in range(0, len(data), chunk):
        if bad.transport.closed:
            break
        bad.connection.data_received(data[start : start + chunk])
        await settle(5)
    await settle()

    frames = await good.exchange(
        client.send(1, 0), client.message_block("good", 0, b"still served")
    )
    await settle()
    frames += good.received()
    kinds = _types(frames)
    assert pb.BaseCommand.SEND_RECEIPT in kinds, frames
    delivered = [f.payload or b"" for f in frames if f.command.type == pb.BaseCommand.MESSAGE]
    assert [p for p in delivered if p.endswith(b"still served")] != [], frames
    assert not good.transport.closed
    assert loop_errors == [], loop_errors
    bad.disconnect()
    good.disconnect()
    await settle()
    await broker.broker.close()


def _types(frames: list[Any]) -> list[int]:
    return [frame.command.type for frame in frames]
