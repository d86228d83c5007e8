"""One connection to a broker: CONNECT, requests matched with their answers by request id,
and the frames of producers and readers handed to them by their ids.

Runs on the wire client's event loop; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from connectors.wire import requests
from connectors.wire.errors import ConnectionClosedError, WireError
from connectors.wire.settings import BrokerAddress, WireSettings
from dedup_broker.errors import ProtocolError
from dedup_broker.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    Frame,
    FrameDecoder,
    commands,
    encode_command,
)
from dedup_broker.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

_BASE = pb.BaseCommand
MAX_FRAME_SIZE = 64 * 1024 * 1024
"""What this client accepts from a broker (a broker's own limit is 5 MiB by default)."""

_PRODUCER_FRAMES = {
    _BASE.SEND_RECEIPT: lambda c: c.send_receipt.producer_id,
    _BASE.SEND_ERROR: lambda c: c.send_error.producer_id,
    _BASE.CLOSE_PRODUCER: lambda c: c.close_producer.producer_id,
}
_CONSUMER_FRAMES = {
    _BASE.MESSAGE: lambda c: c.message.consumer_id,
    _BASE.CLOSE_CONSUMER: lambda c: c.close_consumer.consumer_id,
    _BASE.REACHED_END_OF_TOPIC: lambda c: c.reachedEndOfTopic.consumer_id,
    _BASE.ACTIVE_CONSUMER_CHANGE: lambda c: c.active_consumer_change.consumer_id,
}
_ANSWERS: dict[int, Callable[[pb.BaseCommand], int]] = {
    _BASE.SUCCESS: lambda c: c.success.request_id,
    _BASE.ERROR: lambda c: c.error.request_id,
    _BASE.PRODUCER_SUCCESS: lambda c: c.producer_success.request_id,
    _BASE.LOOKUP_RESPONSE: lambda c: c.lookupTopicResponse.request_id,
    _BASE.PARTITIONED_METADATA_RESPONSE: lambda c: c.partitionMetadataResponse.request_id,
}


class Listener(Protocol):
    """A producer or a reader: gets its frames, and hears when the connection is gone."""

    def frame_received(self, frame: Frame) -> None: ...

    def connection_lost(self, connection: BrokerConnection) -> None: ...


class BrokerConnection(asyncio.Protocol):
    """A connection's state; open it with :meth:`open`."""

    def __init__(self, address: BrokerAddress, settings: WireSettings) -> None:
        self.address = address
        self.settings = settings
        self.closed = False
        self.max_message_size = DEFAULT_MAX_FRAME_SIZE
        self.producers: dict[int, Listener] = {}
        self.consumers: dict[int, Listener] = {}
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(MAX_FRAME_SIZE)
        self._connected: asyncio.Future[pb.CommandConnected] = (
            asyncio.get_running_loop().create_future()
        )
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._on_close: list[Callable[[BrokerConnection], None]] = []

    @classmethod
    async def open(
        cls, address: BrokerAddress, settings: WireSettings, proxy_to: str | None = None
    ) -> BrokerConnection:
        """Connect and say CONNECT; raises ``WireError`` if the broker is unreachable or
        refuses the credentials."""
        loop = asyncio.get_running_loop()
        connection = cls(address, settings)
        context = settings.ssl_context() if address.tls else None
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: connection,
                    address.host,
                    address.port,
                    ssl=context,
                    server_hostname=address.host if context is not None else None,
                ),
                settings.connection_timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosedError(f"cannot connect to {address}: {exc}") from exc
        method, data = settings.credentials()
        connection.write(encode_command(requests.connect(method, data, proxy_to)))
        try:
            connected = await asyncio.wait_for(connection._connected, settings.operation_timeout)
        except TimeoutError as exc:
            connection.close()
            raise ConnectionClosedError(f"{address} did not answer CONNECT") from exc
        if connected.HasField("max_message_size") and connected.max_message_size > 0:
            connection.max_message_size = connected.max_message_size
        return connection

    def when_closed(self, callback: Callable[[BrokerConnection], None]) -> None:
        self._on_close.append(callback)

    # --- output -----------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._transport is not None and not self.closed:
            self._transport.write(data)

    def write_command(self, command: pb.BaseCommand) -> None:
        self.write(encode_command(command))

    def write_parts(self, parts: list[bytes]) -> None:
        if self._transport is not None and not self.closed:
            self._transport.writelines(parts)

    async def request(self, command: pb.BaseCommand, request_id: int) -> pb.BaseCommand:
        """Send a command and wait for its answer; an ERROR (or a failed lookup) raises."""
        if self.closed:
            raise ConnectionClosedError(f"the connection to {self.address} is closed")
        future: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = future
        self.write(encode_command(command))
        try:
            return await asyncio.wait_for(future, self.settings.operation_timeout)
        except TimeoutError as exc:
            raise WireError(
                f"{_BASE.Type.Name(command.type)} to {self.address} had no answer within "
                f"{self.settings.operation_timeout:.0f}s",
                retriable=True,
            ) from exc
        finally:
            self._requests.pop(request_id, None)

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing the connection to %s: %s", self.address, exc)
            self.close()
            return
        for frame in frames:
            self._dispatch(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        error = ConnectionClosedError(f"the connection to {self.address} was lost: {exc or 'EOF'}")
        if not self._connected.done():
            self._connected.set_exception(error)
            self._connected.exception()  # retrieved: nobody may be waiting any more
        for future in self._requests.values():
            if not future.done():
                future.set_exception(error)
        self._requests.clear()
        for listener in [*self.producers.values(), *self.consumers.values()]:
            listener.connection_lost(self)
        self.producers.clear()
        self.consumers.clear()
        for callback in self._on_close:
            callback(self)

    # --- input ------------------------------------------------------------------------
    def _dispatch(self, frame: Frame) -> None:
        command = frame.command
        kind = command.type
        if kind in _PRODUCER_FRAMES:
            self._to(self.producers, _PRODUCER_FRAMES[kind](command), frame)
        elif kind in _CONSUMER_FRAMES:
            self._to(self.consumers, _CONSUMER_FRAMES[kind](command), frame)
        elif kind in _ANSWERS:
            self._answer(_ANSWERS[kind](command), command)
        elif kind == _BASE.CONNECTED:
            if not self._connected.done():
                self._connected.set_result(command.connected)
        elif kind == _BASE.PING:
            self.write_command(commands.pong())
        elif kind == _BASE.AUTH_CHALLENGE:
            self.write_command(requests.auth_response(*self.settings.credentials()))
        elif kind != _BASE.PONG:
            log.debug("ignoring %s from %s", _BASE.Type.Name(kind), self.address)

    @staticmethod
    def _to(listeners: dict[int, Listener], listener_id: int, frame: Frame) -> None:
        listener = listeners.get(listener_id)
        if listener is not None:
            listener.frame_received(frame)

    def _answer(self, request_id: int, command: pb.BaseCommand) -> None:
        if command.type == _BASE.ERROR and not self._connected.done():
            # CONNECT refused (credentials): the broker closes the connection next.
            self._connected.set_exception(
                WireError.of_server(command.error.error, command.error.message)
            )
            return
        future = self._requests.get(request_id)
        if future is None or future.done():
            return
        failure = _failure(command)
        if failure is not None:
            future.set_exception(failure)
        elif command.type == _BASE.PRODUCER_SUCCESS and not command.producer_success.producer_ready:
            return  # queued for exclusive access: the final PRODUCER_SUCCESS follows
        else:
            future.set_result(command)


def _failure(command: pb.BaseCommand) -> WireError | None:
    if command.type == _BASE.ERROR:
        return WireError.of_server(command.error.error, command.error.message)
    if command.type == _BASE.LOOKUP_RESPONSE:
        lookup = command.lookupTopicResponse
        if lookup.response == pb.CommandLookupTopicResponse.Failed:
            return WireError.of_server(lookup.error, lookup.message)
    if command.type == _BASE.PARTITIONED_METADATA_RESPONSE:
        metadata = command.partitionMetadataResponse
        if metadata.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            return WireError.of_server(metadata.error, metadata.message)
    return None
