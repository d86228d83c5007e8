"""A reader that receives whole entries of one topic partition, from a position on.

A non-durable, exclusive subscription starting at an entry (inclusively), with a large
window of permits so that the broker streams entries without waiting for the caller. The
caller (a Spark task's thread) takes entries with :meth:`EntryReader.receive` and reports
the messages it consumed, which opens the window again. After a lost connection, or when
the broker closes the subscription, the reader subscribes again at the last entry it
received and drops what it already had, so the caller sees every entry once, in order.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
from dataclasses import dataclass

from connectors.positions import Position
from connectors.wire import requests
from connectors.wire.client import CLOSE_TIMEOUT_SECONDS, WireClient
from connectors.wire.connection import BrokerConnection
from connectors.wire.errors import ConnectionClosedError, WireError
from dedup_broker.protocol import Frame, as_signed64
from dedup_broker.protocol import client_commands as commands
from dedup_broker.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

_BASE = pb.BaseCommand
EARLIEST = Position(-1, -1)
DEFAULT_PERMITS = 50_000
"""Messages the broker may send ahead of the caller (about 5 MB of 100-byte messages)."""


@dataclass(frozen=True, slots=True)
class ReceivedEntry:
    """One entry as stored: its position and its message block (metadata and payload)."""

    ledger_id: int
    entry_id: int
    block: bytes


class EntryReader:
    """Create with :meth:`create`; ``receive`` from one thread."""

    def __init__(self, client: WireClient, topic: str, start: Position, permits: int):
        self.topic = topic
        self._client = client
        self._start = start
        self._permits = max(permits, 1)
        self._id = client.next_id()
        self._subscription = requests.reader_subscription()
        self._entries: queue.SimpleQueue[ReceivedEntry | WireError] = queue.SimpleQueue()
        # Only the client's loop touches these.
        self._last: Position | None = None
        self._consumed = 0
        self._connection: BrokerConnection | None = None
        self._resubscribing: asyncio.Task[None] | None = None
        self._closing = False

    @classmethod
    def create(
        cls,
        client: WireClient,
        topic: str,
        start: Position = EARLIEST,
        permits: int = DEFAULT_PERMITS,
    ) -> EntryReader:
        """A reader of ``topic`` from the entry of ``start`` on, inclusively (its batch
        index plays no role); ``EARLIEST``: from the first entry."""
        reader = cls(client, topic, start, permits)
        client.run(client.retrying(reader._subscribe))
        return reader

    # --- the caller's side ----------------------------------------------------------------
    def receive(self, timeout: float) -> ReceivedEntry | None:
        """The next entry, or None if none came within ``timeout`` seconds."""
        try:
            item = self._entries.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, WireError):
            raise item
        return item

    def consumed(self, messages: int) -> None:
        """The caller is done with that many messages: the broker may send as many more."""
        self._client.call_soon(self._on_consumed, messages)

    def close(self) -> None:
        if not self._client.loop.is_closed():
            self._client.run(self._close(), timeout=CLOSE_TIMEOUT_SECONDS + 1)

    # --- on the client's loop -------------------------------------------------------------
    async def _subscribe(self) -> None:
        start = self._last or self._start
        connection = await self._client.lookup(self.topic)
        request_id = self._client.next_id()
        connection.consumers[self._id] = self
        try:
            await connection.request(
                requests.subscribe_reader(
                    self.topic, self._id, request_id, self._subscription, start
                ),
                request_id,
            )
        except BaseException:
            connection.consumers.pop(self._id, None)
            raise
        if connection.closed:
            raise ConnectionClosedError(f"the connection to {connection.address} closed")
        self._connection = connection
        self._consumed = 0
        connection.write_command(commands.flow(self._id, self._permits))

    def frame_received(self, frame: Frame) -> None:
        command = frame.command
        if command.type == _BASE.MESSAGE and frame.payload is not None:
            message_id = command.message.message_id
            position = Position(as_signed64(message_id.ledgerId), as_signed64(message_id.entryId))
            if self._last is not None and position <= self._last:
                return  # sent again after a new subscription: the caller has it
            self._last = position
            self._entries.put(ReceivedEntry(position.ledger_id, position.entry_id, frame.payload))
        elif command.type == _BASE.CLOSE_CONSUMER:
            log.info("%s: the broker closed the reader, subscribing again", self.topic)
            if self._connection is not None:
                self._connection.consumers.pop(self._id, None)
            self._lost()

    def connection_lost(self, connection: BrokerConnection) -> None:
        if connection is self._connection:
            self._lost()

    def _on_consumed(self, messages: int) -> None:
        self._consumed += messages
        if self._connection is not None and self._consumed >= self._permits // 2:
            self._connection.write_command(commands.flow(self._id, self._consumed))
            self._consumed = 0

    def _lost(self) -> None:
        self._connection = None
        if self._closing:
            return
        if self._resubscribing is None or self._resubscribing.done():
            self._resubscribing = self._client.loop.create_task(self._resubscribe())

    async def _resubscribe(self) -> None:
        """Subscribe again until it works (the caller's read timeout bounds the wait)."""
        try:
            await self._client.retrying(self._subscribe, math.inf)
        except WireError as exc:
            self._entries.put(exc)

    async def _close(self) -> None:
        self._closing = True
        if self._resubscribing is not None:
            self._resubscribing.cancel()
        connection, self._connection = self._connection, None
        if connection is None or connection.closed:
            return
        connection.consumers.pop(self._id, None)
        await self._client.request_quietly(
            connection, lambda request_id: commands.close_consumer(self._id, request_id)
        )
