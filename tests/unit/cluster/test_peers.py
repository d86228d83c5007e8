"""The peer watch: a broker that was killed is reported at once, a frozen one after the
peer timeout, and a live one never."""

from __future__ import annotations

import asyncio
import time

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.peers import PeerState, PeerWatch
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import FrameDecoder, encode_command

OWN = BrokerAddress("127.0.0.1", 1, 2)


class FakeBroker:
    """Answers CONNECT and PING as a broker does, until ``freeze()``."""

    def __init__(self) -> None:
        self.frozen = False
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> BrokerAddress:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return BrokerAddress("127.0.0.1", port, 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                if self.frozen:
                    continue
                if frame.command.type == pb.BaseCommand.CONNECT:
                    writer.write(encode_command(commands.connected("fake", 21, 5 * 1024 * 1024)))
                elif frame.command.type == pb.BaseCommand.PING:
                    writer.write(encode_command(commands.pong()))

    def kill(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()


async def until(condition: object, timeout: float) -> float:
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, "condition not met in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_killed_broker_is_reported_at_once_and_never_answers_again() -> None:
    broker = FakeBroker()
    address = await broker.start()
    reports: list[PeerState] = []
    watch = PeerWatch(OWN, 2.0, lambda _endpoint, state: reports.append(state))
    try:
        watch.follow([address])
        assert await watch.answers(address)
        broker.kill()
        took = await until(lambda: reports == [PeerState.GONE], 2.0)
        assert took < 1.0
        assert not await watch.answers(address)
    finally:
        watch.close()


async def test_a_frozen_broker_is_reported_after_the_peer_timeout_only() -> None:
    broker = FakeBroker()
    address = await broker.start()
    reports: list[PeerState] = []
    watch = PeerWatch(OWN, 2.0, lambda _endpoint, state: reports.append(state))
    try:
        watch.follow([address])
        assert await watch.answers(address)
        await asyncio.sleep(1.0)
        assert reports == []  # answering all along
        broker.frozen = True
        took = await until(lambda: reports == [PeerState.UNRESPONSIVE], 6.0)
        assert took >= 2.0 - 0.6  # no answer for 2 s: the last one came up to a PING before
        assert not await watch.answers(address)
        broker.frozen = False
        await until(lambda: watch.state(address) is PeerState.LIVE, 3.0)
    finally:
        watch.close()
        broker.kill()
