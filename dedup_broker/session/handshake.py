"""CONNECT and the keep-alive commands: what a connection must do before anything else;
and the refresh of expiring credentials (AUTH_CHALLENGE / AUTH_RESPONSE, Pulsar's PIP-55)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from dedup_broker import __version__
from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame
from dedup_broker.security.authentication import AuthenticationError

if TYPE_CHECKING:
    from dedup_broker.session.context import Handler, Session

log = logging.getLogger(__name__)

SERVER_PROTOCOL_VERSION = 21
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
"""The challenge that asks a client for its current credentials again."""


class Handshake:
    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.connected = False
        self.protocol_version = 0
        self._method = ""
        self._expires_at: float | None = None
        self._supports_refresh = False
        self._challenged = False
        self._refresh_check: asyncio.TimerHandle | None = None

    def handlers(self) -> dict[int, Handler]:
        return {
            pb.BaseCommand.CONNECT: self._on_connect,
            pb.BaseCommand.PING: self._on_ping,
            pb.BaseCommand.PONG: self._on_pong,
            pb.BaseCommand.AUTH_RESPONSE: self._on_auth_response,
        }

    def _on_connect(self, frame: Frame) -> None:
        if self.connected:
            raise ProtocolError("CONNECT received twice on one connection")
        connect = frame.command.connect
        method = connect.auth_method_name
        if not method and connect.HasField("auth_method"):
            method = {
                pb.AuthMethodNone: "",
                pb.AuthMethodYcaV1: "yca",
                pb.AuthMethodAthens: "athens",
            }[connect.auth_method]
        try:
            self.connection.role = self.connection.authenticator.authenticate(
                method, connect.auth_data, self.connection.peer_certificate
            )
        except AuthenticationError as exc:
            log.info("CONNECT from %s refused: %s", self.connection.remote_address, exc)
            self.connection.send_command(commands.error(0, pb.AuthenticationError, str(exc)))
            self.connection.close()
            return
        if self.connection.role is not None:
            log.info(
                "CONNECT from %s authenticated with role %s using %s",
                self.connection.remote_address,
                self.connection.role,
                method or "none",
            )
        self.protocol_version = min(connect.protocol_version, SERVER_PROTOCOL_VERSION)
        self.connection.client_version = connect.client_version
        self.connected = True
        self._method = method
        self._expires_at = self.connection.authenticator.expires_at(method, connect.auth_data)
        self._supports_refresh = connect.feature_flags.supports_auth_refresh
        if self._expires_at is not None:
            self._schedule_refresh_check()
        self.connection.send_command(
            commands.connected(
                f"dedup-broker {__version__}",
                self.protocol_version,
                self.connection.config.max_message_size,
                pb.FeatureFlags(supports_topic_watchers=True),
            )
        )

    # --- refreshing expiring credentials -----------------------------------------------
    def _schedule_refresh_check(self) -> None:
        interval = self.connection.config.authentication_refresh_check_seconds
        loop = asyncio.get_running_loop()
        self._refresh_check = loop.call_later(interval, self._check_credentials)

    def _check_credentials(self) -> None:
        """Expired credentials are challenged once; still expired at the next check (no
        valid AUTH_RESPONSE meanwhile), or a client that cannot refresh: the connection
        closes, and the client reconnects with whatever credentials it has then."""
        if self.connection.closed or self._expires_at is None:
            return
        if time.time() >= self._expires_at:
            who = self.connection.remote_address
            if self._challenged or not self._supports_refresh:
                log.info("closing the connection from %s: its credentials expired", who)
                self.connection.close()
                return
            log.info("credentials of %s expired: asking for new ones", who)
            self._challenged = True
            self.connection.send_command(
                commands.auth_challenge(self._method, REFRESH_AUTH_DATA, self.protocol_version)
            )
        self._schedule_refresh_check()

    def _on_auth_response(self, frame: Frame) -> None:
        response = frame.command.authResponse.response
        method = response.auth_method_name or self._method
        who = self.connection.remote_address
        try:
            role = self.connection.authenticator.authenticate(
                method, response.auth_data, self.connection.peer_certificate
            )
        except AuthenticationError as exc:
            log.info("refreshed credentials of %s refused: %s", who, exc)
            self.connection.send_command(commands.error(0, pb.AuthenticationError, str(exc)))
            self.connection.close()
            return
        if role != self.connection.role:
            log.info(
                "refreshed credentials of %s name role %s, not %s", who, role, self.connection.role
            )
            message = "refreshed credentials must name the connection's role"
            self.connection.send_command(commands.error(0, pb.AuthenticationError, message))
            self.connection.close()
            return
        self._method = method
        self._expires_at = self.connection.authenticator.expires_at(method, response.auth_data)
        self._challenged = False
        log.info("credentials of %s refreshed (role %s)", who, role)

    def connection_lost(self) -> None:
        if self._refresh_check is not None:
            self._refresh_check.cancel()

    def _on_ping(self, frame: Frame) -> None:
        self.connection.send_command(commands.pong())

    def _on_pong(self, frame: Frame) -> None:
        self.connection.pong_received()
