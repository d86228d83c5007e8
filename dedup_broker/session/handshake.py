"""CONNECT and the keep-alive commands: what a connection must do before anything else."""

from __future__ import annotations

import logging
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


class Handshake:
    def __init__(self, connection: Session) -> None:
        self.connection = connection
        self.connected = False
        self.protocol_version = 0

    def handlers(self) -> dict[int, Handler]:
        return {
            pb.BaseCommand.CONNECT: self._on_connect,
            pb.BaseCommand.PING: self._on_ping,
            pb.BaseCommand.PONG: self._on_pong,
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
        self.connected = True
        self.connection.send_command(
            commands.connected(
                f"dedup-broker {__version__}",
                self.protocol_version,
                self.connection.config.max_message_size,
                pb.FeatureFlags(supports_topic_watchers=True),
            )
        )

    def _on_ping(self, frame: Frame) -> None:
        self.connection.send_command(commands.pong())

    def _on_pong(self, frame: Frame) -> None:
        self.connection.pong_received()
