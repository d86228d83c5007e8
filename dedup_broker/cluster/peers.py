"""Whether the other brokers of the cluster answer: each one's Pulsar port, watched.

Kafka's group says who is a member, but a member that was killed stays one until its
session expires, and a frozen one too. Clients must never be sent to such a broker (their
connection attempts fail and their back-off doubles), and the group must not wait for the
session to move its slots. So every broker keeps one connection to each other broker's
Pulsar port: CONNECT, then a PING every half second.

- Connection refused or reset with nothing answered: the process is gone (kill -9, a
  crash, a clean exit); it is reported at once.
- No answer to several PINGs in a row for ``clusterPeerTimeoutMillis``: the broker is
  frozen or hung; it is reported too. Missed PINGs are counted only while this broker
  runs, so a broker that was itself paused does not report everyone else on waking.
- Any answer (CONNECTED, PONG, even an authentication error): it is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from enum import Enum

from dedup_broker import __version__
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import FrameDecoder, encode_command

log = logging.getLogger(__name__)

PING_SECONDS = 0.5
ANSWER_SECONDS = 1.0
"""How long one PING (or the CONNECT) waits for its answer."""
MISSED_IN_A_ROW = 3
RETRY_SECONDS = 1.0
"""Between two connections when the broker refused the watch (authentication on)."""

Endpoint = tuple[str, int]


class PeerState(Enum):
    UNKNOWN = "unknown"
    """Not asked yet."""
    LIVE = "live"
    GONE = "gone"
    """Nothing listens on its port any more."""
    UNRESPONSIVE = "unresponsive"
    """Its port takes connections but nothing answers."""


def endpoint_of(address: BrokerAddress) -> Endpoint:
    """The port the watch connects to: the plain one, else the TLS one."""
    if address.broker_port:
        return address.host, address.broker_port
    return address.host, address.broker_port_tls or 0


Credentials = tuple[str, bytes]
"""A CONNECT's authentication method and data (the brokers' own client credentials)."""


def _connect_command(credentials: Credentials | None) -> bytes:
    command = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    command.connect.client_version = f"dedup-broker-peer-watch/{__version__}"
    command.connect.protocol_version = 21
    if credentials is not None:
        command.connect.auth_method_name, command.connect.auth_data = credentials
    return encode_command(command)


_PING = encode_command(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
_PONG = encode_command(pb.BaseCommand(type=pb.BaseCommand.PONG, pong=pb.CommandPong()))


class _Watcher:
    """One broker's port, watched until ``stop``."""

    def __init__(self, watch: PeerWatch, endpoint: Endpoint, tls: bool) -> None:
        self.watch = watch
        self.endpoint = endpoint
        self.tls = tls
        self.state = PeerState.UNKNOWN
        self.changed = asyncio.Event()
        self.last_answer = time.monotonic()
        self._refused = False
        """The broker answered CONNECT with an error (authentication on): it is asked
        again every ``RETRY_SECONDS`` rather than watched on one connection."""
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        self._task.cancel()

    def _set(self, state: PeerState) -> None:
        if state is self.state:
            return
        previous, self.state = self.state, state
        self.changed.set()
        self.changed = asyncio.Event()
        if state is PeerState.LIVE:
            self.last_answer = time.monotonic()
            if previous is not PeerState.UNKNOWN:
                log.info("broker at %s:%d answers again", *self.endpoint)
        elif state is not PeerState.UNKNOWN:
            log.warning("broker at %s:%d is %s", *self.endpoint, state.value)
            self.watch.report(self.endpoint, state)

    async def _run(self) -> None:
        missed = 0
        while True:
            outcome = await self._session()
            if outcome is PeerState.GONE:
                self._set(PeerState.GONE)
            elif outcome is PeerState.UNRESPONSIVE:
                missed += 1
                waited = time.monotonic() - self.last_answer
                if missed >= MISSED_IN_A_ROW and waited >= self.watch.timeout_seconds:
                    self._set(PeerState.UNRESPONSIVE)
            elif not self._refused:
                # The connection ended after answers: until the next one says more, the
                # broker is not known to be there (it may have been killed just now).
                missed = 0
                self._set(PeerState.UNKNOWN)
                continue
            await asyncio.sleep(RETRY_SECONDS)

    async def _session(self) -> PeerState:
        """One connection: LIVE when it was answered and then ended, GONE when refused,
        UNRESPONSIVE when its CONNECT or a PING went unanswered."""
        host, port = self.endpoint
        context = None
        if self.tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # liveness only: nothing secret is sent
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context), ANSWER_SECONDS
            )
        except TimeoutError:
            return PeerState.UNRESPONSIVE
        except (OSError, ssl.SSLError):
            return PeerState.GONE
        try:
            return await self._converse(reader, writer)
        finally:
            writer.close()

    async def _converse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> PeerState:
        """Always reading, so that the end of the connection is seen at once; a PING every
        ``PING_SECONDS``, each unanswered one counted."""
        decoder = FrameDecoder()
        writer.write(_connect_command(self.watch.credentials))
        answered = outstanding = False
        missed = 0
        deadline = time.monotonic() + ANSWER_SECONDS
        while True:
            try:
                data = await asyncio.wait_for(
                    reader.read(65536), max(0.0, deadline - time.monotonic())
                )
            except TimeoutError:
                if outstanding or not answered:
                    missed += 1
                    waited = time.monotonic() - self.last_answer
                    if missed >= MISSED_IN_A_ROW and waited >= self.watch.timeout_seconds:
                        self._set(PeerState.UNRESPONSIVE)
                        return PeerState.UNRESPONSIVE
                outstanding = True
                writer.write(_PING)
                deadline = time.monotonic() + PING_SECONDS
                continue
            except OSError:
                return PeerState.LIVE if answered else PeerState.GONE
            if not data:
                return PeerState.LIVE if answered else PeerState.GONE
            answered, outstanding, missed = True, False, 0
            self._set(PeerState.LIVE)
            self.last_answer = time.monotonic()
            try:
                frames = decoder.feed(data)
            except ProtocolError:
                return PeerState.LIVE
            for frame in frames:
                if frame.command.type == pb.BaseCommand.PING:
                    writer.write(_PONG)
                elif frame.command.type == pb.BaseCommand.ERROR:
                    self._refused = True  # authentication on: alive all the same
                    return PeerState.LIVE


Reporter = Callable[[Endpoint, PeerState], None]


class PeerWatch:
    """Watches the other brokers' ports; ``on_down`` hears of each one found gone or
    unresponsive (again every few seconds while it stays so)."""

    def __init__(
        self,
        own: BrokerAddress,
        timeout_seconds: float,
        on_down: Reporter,
        credentials: Credentials | None = None,
    ) -> None:
        self.own = own
        self.timeout_seconds = timeout_seconds
        self.credentials = credentials
        self._on_down = on_down
        self._watchers: dict[Endpoint, _Watcher] = {}

    def follow(self, brokers: list[BrokerAddress]) -> None:
        """Watch these brokers (the group's members), and no others."""
        wanted = {endpoint_of(b): b for b in brokers if not b.same_endpoint(self.own)}
        for endpoint in list(self._watchers):
            if endpoint not in wanted:
                self._watchers.pop(endpoint).stop()
        for endpoint, broker in wanted.items():
            if endpoint not in self._watchers:
                tls = not broker.broker_port
                self._watchers[endpoint] = _Watcher(self, endpoint, tls)

    def state(self, broker: BrokerAddress) -> PeerState:
        watcher = self._watchers.get(endpoint_of(broker))
        return watcher.state if watcher is not None else PeerState.UNKNOWN

    def down(self) -> list[Endpoint]:
        return [
            endpoint
            for endpoint, watcher in self._watchers.items()
            if watcher.state in (PeerState.GONE, PeerState.UNRESPONSIVE)
        ]

    async def answers(self, broker: BrokerAddress, wait_seconds: float = ANSWER_SECONDS) -> bool:
        """Whether ``broker`` answers; a broker not watched yet is asked first (up to
        ``wait_seconds``)."""
        if broker.same_endpoint(self.own):
            return True
        endpoint = endpoint_of(broker)
        watcher = self._watchers.get(endpoint)
        if watcher is None:
            watcher = self._watchers[endpoint] = _Watcher(self, endpoint, not broker.broker_port)
        if watcher.state is PeerState.UNKNOWN:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.changed.wait(), wait_seconds)
        return watcher.state is PeerState.LIVE

    def report(self, endpoint: Endpoint, state: PeerState) -> None:
        self._on_down(endpoint, state)

    def close(self) -> None:
        for watcher in self._watchers.values():
            watcher.stop()
        self._watchers.clear()
