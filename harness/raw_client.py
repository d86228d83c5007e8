"""A minimal blocking Pulsar protocol client for feeding the broker exact bytes."""

from __future__ import annotations

import socket
import ssl
import time

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame, FrameDecoder, encode_command
from harness import client_commands


class RawConnection:
    def __init__(
        self,
        host: str,
        port: int,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self._frames: list[Frame] = []

    def connect(self, protocol_version: int = 21) -> pb.CommandConnected:
        self.send(client_commands.connect(protocol_version, "raw-test-client"))
        frame = self.expect(pb.BaseCommand.CONNECTED)
        return frame.command.connected

    def send(self, command: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(command))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self, timeout: float = 10.0) -> Frame:
        deadline = time.monotonic() + timeout
        while not self._frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the broker")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._frames.extend(self.decoder.feed(data))
        return self._frames.pop(0)

    def expect(self, command_type: int, timeout: float = 10.0) -> Frame:
        """The next frame of that type, skipping keep-alive pings (answered)."""
        while True:
            frame = self.receive(timeout)
            if frame.command.type == pb.BaseCommand.PING:
                self.send(pb.BaseCommand(type=pb.BaseCommand.PONG, pong=pb.CommandPong()))
                continue
            if frame.command.type != command_type:
                raise AssertionError(f"expected command {command_type}, got {frame.command}")
            return frame

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True once the broker has closed the socket (frames before that are dropped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.sock.close()
