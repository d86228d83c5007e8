"""Requests one broker sends another over the Pulsar protocol, as Pulsar's brokers do:
a transaction's coordinator asks the owners of its topics to end it there
(``END_TXN_ON_PARTITION``, ``END_TXN_ON_SUBSCRIPTION``).

One connection per broker, opened on first use with the brokers' own credentials and
kept; answers are matched by request id. A connection that breaks fails every request
waiting on it with a retriable error (the coordinator drives the ending again).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl

from dedup_broker import __version__
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.peers import Credentials, Endpoint, endpoint_of
from dedup_broker.errors import ProtocolError, ServiceNotReadyError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import FrameDecoder, encode_command

log = logging.getLogger(__name__)

REQUEST_SECONDS = 30.0
CONNECT_SECONDS = 5.0


class PeerUnavailableError(ServiceNotReadyError):
    """The other broker could not be reached or did not answer in time."""


class _PeerConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._waiting: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._connected: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._reading = asyncio.ensure_future(self._read(reader))

    @property
    def open(self) -> bool:
        return not self._reading.done()

    async def connect(self, credentials: Credentials | None) -> None:
        command = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
        command.connect.client_version = f"dedup-broker-peer/{__version__}"
        command.connect.protocol_version = 21
        if credentials is not None:
            command.connect.auth_method_name, command.connect.auth_data = credentials
        self._writer.write(encode_command(command))
        answer = await asyncio.wait_for(asyncio.shield(self._connected), CONNECT_SECONDS)
        if answer.type != pb.BaseCommand.CONNECTED:
            raise PeerUnavailableError(f"the broker refused the connection: {answer.error}")

    async def request(self, command: pb.BaseCommand, request_id: int) -> pb.BaseCommand:
        answer: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            self._writer.write(encode_command(command))
            return await asyncio.wait_for(answer, REQUEST_SECONDS)
        finally:
            self._waiting.pop(request_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    self._answer(frame.command)
        except (OSError, ProtocolError) as exc:
            log.info("connection to a peer broker ended: %s", exc)
        finally:
            gone = PeerUnavailableError("the connection to the broker ended")
            if not self._connected.done():
                self._connected.set_exception(gone)
                self._connected.exception()
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(gone)
            self._writer.close()

    def _answer(self, command: pb.BaseCommand) -> None:
        if command.type == pb.BaseCommand.PING:
            self._writer.write(encode_command(commands.pong()))
        elif command.type in (pb.BaseCommand.CONNECTED, pb.BaseCommand.ERROR) and not (
            self._connected.done()
        ):
            self._connected.set_result(command)
        else:
            waiting = self._waiting.get(commands.request_id_of(command) or -1)
            if waiting is not None and not waiting.done():
                waiting.set_result(command)

    def close(self) -> None:
        self._reading.cancel()
        self._writer.close()


class PeerRequests:
    def __init__(self, credentials: Credentials | None) -> None:
        self._credentials = credentials
        self._connections: dict[Endpoint, _PeerConnection] = {}
        self._opening: dict[Endpoint, asyncio.Lock] = {}
        self._request_ids = itertools.count(1)

    async def request(self, peer: BrokerAddress, command: pb.BaseCommand) -> pb.BaseCommand:
        """Send ``command`` (its request id is set here) and return the answer."""
        connection = await self._connection(peer)
        request_id = next(self._request_ids)
        sub = commands.sub_command(command)
        assert sub is not None
        sub.request_id = request_id  # type: ignore[attr-defined]
        try:
            return await connection.request(command, request_id)
        except TimeoutError:
            raise PeerUnavailableError(
                f"{peer.service_url} did not answer {commands.command_name(command)}"
            ) from None

    async def _connection(self, peer: BrokerAddress) -> _PeerConnection:
        endpoint = endpoint_of(peer)
        async with self._opening.setdefault(endpoint, asyncio.Lock()):
            connection = self._connections.get(endpoint)
            if connection is not None and connection.open:
                return connection
            context = None
            if not peer.broker_port:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE  # a broker of the same cluster
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(*endpoint, ssl=context), CONNECT_SECONDS
                )
            except (OSError, ssl.SSLError, TimeoutError) as exc:
                raise PeerUnavailableError(f"{peer.service_url} cannot be reached: {exc}") from exc
            connection = _PeerConnection(reader, writer)
            try:
                await connection.connect(self._credentials)
            except (TimeoutError, PeerUnavailableError) as exc:
                connection.close()
                raise PeerUnavailableError(f"{peer.service_url}: {exc}") from exc
            self._connections[endpoint] = connection
            return connection

    def close(self) -> None:
        for connection in self._connections.values():
            with contextlib.suppress(Exception):
                connection.close()
        self._connections.clear()
