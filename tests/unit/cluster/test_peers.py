"""The peer watch: a broker that was killed is reported at once, a frozen one after the
peer timeout, and a live one never.

Ordered, not timed: "at once" means well before any timeout could have fired (the timeout
is a minute), "after the timeout" means no sooner than the timeout after the last answer
the broker gave."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

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
        self.last_pong = 0.0
        """When it last answered a PING (monotonic)."""

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
                    self.last_pong = time.monotonic()

    def kill(self) -> None:
        """Close the port and every connection (again: nothing more happens)."""
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()


async def until(condition: Callable[[], bool], bound: float) -> None:
    """Wait for ``condition``; ``bound`` only stops a hung test."""
    async with asyncio.timeout(bound):
        while not condition():
            await asyncio.sleep(0.05)


async def test_a_killed_broker_is_reported_at_once_and_never_answers_again() -> None:
    broker = FakeBroker()
    address = await broker.start()
    reports: list[PeerState] = []
    watch = PeerWatch(OWN, 60.0, lambda _endpoint, state: reports.append(state))
    try:
        watch.follow([address])
        assert await watch.answers(address)
        broker.kill()
        # A minute's timeout cannot have fired: the closed connection told.
        await until(lambda: reports == [PeerState.GONE], 30.0)
        assert not await watch.answers(address)
    finally:
        watch.close()
        broker.kill()


async def test_a_frozen_broker_is_reported_after_the_peer_timeout_only() -> None:
    broker = FakeBroker()
    address = await broker.start()
    reported_at: list[float] = []
    watch = PeerWatch(OWN, 2.0, lambda _endpoint, _state: reported_at.append(time.monotonic()))
    try:
        watch.follow([address])
        assert await watch.answers(address)
        await until(lambda: broker.last_pong > 0, 30.0)  # it has answered a PING
        assert reported_at == []
        broker.frozen = True
        await until(lambda: bool(reported_at), 30.0)
        assert watch.state(address) is PeerState.UNRESPONSIVE
        assert reported_at[0] - broker.last_pong >= 2.0
        assert not await watch.answers(address)
        broker.frozen = False
        await until(lambda: watch.state(address) is PeerState.LIVE, 30.0)
    finally:
        watch.close()
        broker.kill()
