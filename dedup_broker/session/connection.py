"""One client connection: frames in, commands dispatched to their concern, replies out.

The connection owns the transport, the frame decoder, keep-alive and back-pressure; the
commands themselves are handled by one object per concern (handshake, producers,
consumers, lookups). Bad input gets a clear error (or, for bytes that cannot be framed, a
closed connection) and is logged once; it never touches other connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.broker import Broker
from dedup_broker.errors import BrokerError, ProtocolError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import FRAME_PADDING, Frame, FrameDecoder, encode_command
from dedup_broker.security.authentication import Authenticator
from dedup_broker.security.authorization import Authorizer
from dedup_broker.security.tls import PeerCertificate, peer_certificate
from dedup_broker.session.consumers import ConsumerCommands
from dedup_broker.session.context import ConnectionHost, Handler
from dedup_broker.session.handshake import Handshake
from dedup_broker.session.lookups import LookupCommands
from dedup_broker.session.metrics import SessionMetrics
from dedup_broker.session.producers import ProducerCommands
from dedup_broker.session.replies import error_reply
from dedup_broker.session.transactions import TransactionCommands

log = logging.getLogger(__name__)

_BASE = pb.BaseCommand


class ClientConnection(asyncio.Protocol):
    def __init__(self, listener: ConnectionHost) -> None:
        self.listener = listener
        self.broker: Broker = listener.broker
        self.config: BrokerConfig = listener.config
        self.metrics: SessionMetrics = listener.metrics
        self.authenticator: Authenticator = listener.authenticator
        self.authorizer: Authorizer = listener.authorizer
        self.advertised_listeners = listener.advertised_listeners
        self.role: str | None = None
        self.client_version = ""
        """What CONNECT named the client (``Pulsar-Python-v3.5.0``...), for stats."""
        self.tls = False
        self.peer_certificate: PeerCertificate | None = None
        self.transport: asyncio.Transport | None = None
        self.remote_address = "?"
        self.remote_host = "?"
        self.decoder = FrameDecoder(self.config.max_message_size + FRAME_PADDING)
        self.writable = True
        self.closed = False
        self._outgoing: list[bytes] = []
        self._pending_sends = 0
        self._reading_paused = False
        self._last_heard = time.monotonic()
        self._ping_outstanding = False
        self._keepalive: asyncio.TimerHandle | None = None
        self.handshake = Handshake(self)
        self.producers = ProducerCommands(self)
        self.consumers = ConsumerCommands(self)
        self.lookups = LookupCommands(self)
        self.transactions = TransactionCommands(self)
        self._handlers: dict[int, Handler] = {
            **self.handshake.handlers(),
            **self.lookups.handlers(),
            **self.producers.handlers(),
            **self.consumers.handlers(),
            **self.transactions.handlers(),
        }

    @property
    def service_url(self) -> str:
        return self.listener.service_url

    @property
    def service_url_tls(self) -> str | None:
        return self.listener.service_url_tls

    # --- transport callbacks --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.remote_host = peer[0] if peer else "?"
        ssl_object = transport.get_extra_info("ssl_object")
        self.tls = ssl_object is not None
        self.peer_certificate = peer_certificate(ssl_object)
        transport.set_write_buffer_limits(high=4 * 1024 * 1024, low=1024 * 1024)
        self.listener.connection_opened(self)
        limit = self.config.max_connections_per_ip
        host = self.remote_host
        if limit and self.listener.connections_from(host) > limit:
            log.warning("refusing a connection from %s: maxConnectionsPerIp=%d", host, limit)
            self.send_command(
                commands.error(
                    0, pb.NotAllowedError, f"Reached the maximum number of connections from {host}"
                )
            )
            self.close()
            return
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        self._last_heard = time.monotonic()
        self._ping_outstanding = False
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.remote_address, exc)
            self.metrics.protocol_errors.inc()
            self._send_error_and_close(str(exc))
            return
        for frame in frames:
            if self.closed:
                return
            self._handle(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        self.handshake.connection_lost()
        self.producers.connection_lost()
        self.consumers.connection_lost()
        self.lookups.connection_lost()
        self.listener.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self.consumers.resume_dispatch()

    # --- output -----------------------------------------------------------------------
    def send_command(self, command: pb.BaseCommand) -> None:
        self.write_bytes(encode_command(command))

    def write_bytes(self, data: bytes) -> None:
        """Queued, and written once the loop's turn ends: what one turn answers on a
        connection (receipts of many producers, replies to many lookups of one client)
        leaves in one system call instead of one each."""
        if self.transport is None or self.closed:
            return
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self.flush)
        self._outgoing.append(data)

    def flush(self) -> None:
        """Write what is queued now."""
        outgoing, self._outgoing = self._outgoing, []
        if self.transport is not None and not self.closed and outgoing:
            self.transport.write(outgoing[0] if len(outgoing) == 1 else b"".join(outgoing))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.flush()
            self.transport.close()

    def _send_error_and_close(self, message: str) -> None:
        self.send_command(commands.error(0, pb.UnknownError, message))
        self.close()

    # --- publish back-pressure -------------------------------------------------------
    def publish_started(self) -> None:
        """Reading pauses while too many publishes of this connection await their outcome."""
        self._pending_sends += 1
        limit = self.config.max_pending_publish_requests_per_connection
        if self._pending_sends >= limit and not self._reading_paused:
            self._reading_paused = True
            if self.transport is not None:
                self.transport.pause_reading()

    def publish_finished(self) -> None:
        self._pending_sends -= 1
        limit = self.config.max_pending_publish_requests_per_connection
        if self._reading_paused and self._pending_sends <= limit // 2:
            self._reading_paused = False
            if self.transport is not None and not self.closed:
                self.transport.resume_reading()

    # --- keep-alive -----------------------------------------------------------------
    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(
            self.config.keep_alive_interval_seconds, self._check_alive
        )

    def _check_alive(self) -> None:
        if self.closed:
            return
        idle = time.monotonic() - self._last_heard
        if idle >= self.config.keep_alive_interval_seconds:
            if self._ping_outstanding:
                log.info("closing %s: no answer to keep-alive ping", self.remote_address)
                self.close()
                return
            self._ping_outstanding = True
            self.send_command(commands.ping())
        self._schedule_keepalive()

    def pong_received(self) -> None:
        self._ping_outstanding = False

    # --- dispatch -------------------------------------------------------------------
    def _handle(self, frame: Frame) -> None:
        command = frame.command
        if not self.handshake.connected and command.type != _BASE.CONNECT:
            self._send_error_and_close(
                f"{commands.command_name(command)} before CONNECT: "
                "the first command must be CONNECT"
            )
            return
        handler = self._handlers.get(command.type)
        if handler is None:
            name = commands.command_name(command)
            log.info("unsupported command %s from %s", name, self.remote_address)
            self.send_command(
                commands.error(
                    commands.request_id_of(command) or 0,
                    pb.NotAllowedError,
                    f"command {name} is not supported by this broker",
                )
            )
            return
        try:
            result = handler(frame)
        except BrokerError as exc:
            self._reply_error(command, exc)
            return
        if result is not None:
            task = asyncio.get_running_loop().create_task(self._guard(command, result))
            task.add_done_callback(_log_unexpected)

    async def _guard(self, command: pb.BaseCommand, work: Awaitable[None]) -> None:
        try:
            await work
        except BrokerError as exc:
            self._reply_error(command, exc)
        except Exception as exc:
            log.exception("%s from %s failed", commands.command_name(command), self.remote_address)
            self._reply_error(command, exc)

    def _reply_error(self, command: pb.BaseCommand, exc: BaseException) -> None:
        self.send_command(error_reply(command, exc))
        log.info("%s from %s refused: %s", commands.command_name(command), self.remote_address, exc)


def _log_unexpected(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("command handler crashed", exc_info=task.exception())
