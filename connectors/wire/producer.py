"""A producer that sends whole batch entries and resends them unchanged until acknowledged.

The caller (a Spark task's thread) encodes each entry: its message block and the range of
sequence ids it covers. The producer sends it, waits for the broker's receipt, and when
the connection is lost, the broker closes the producer or a SEND fails, it looks the topic
up again, attaches anew under the same name and resends every entry not yet acknowledged,
in order, with the same ids: the broker's deduplication (PIP-6) answers what it already
stored with ``-1:-1``. An entry that stays unacknowledged beyond the send timeout, or a
refusal that retrying cannot cure, fails the producer; the caller's next call raises.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from dataclasses import dataclass

from connectors.wire.client import CLOSE_TIMEOUT_SECONDS, FIRST_BACKOFF_SECONDS, WireClient
from connectors.wire.connection import BrokerConnection
from connectors.wire.errors import ConnectionClosedError, WireError
from dedup_broker.protocol import Frame, as_signed64, payload_command_parts
from dedup_broker.protocol import client_commands as commands
from dedup_broker.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

_BASE = pb.BaseCommand
TIMEOUT_CHECK_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class OutgoingEntry:
    """One SEND: a message block (checksum, metadata, payload) and the ids it covers."""

    sequence_id: int
    highest_sequence_id: int
    messages: int
    block: bytes


@dataclass(slots=True)
class ProducerCounts:
    """Messages acknowledged so far, by kind of receipt."""

    stored: int = 0
    duplicates: int = 0
    """Acknowledged with message id ``-1:-1``: the broker already had them."""


@dataclass(slots=True)
class _Pending:
    entry: OutgoingEntry
    deadline: float | None


class EntryProducer:
    """Create with :meth:`create`; ``send`` and ``flush`` from one thread, any thread."""

    def __init__(
        self,
        client: WireClient,
        topic: str,
        name: str | None,
        max_pending_messages: int,
        send_timeout_ms: int,
    ) -> None:
        self.topic = topic
        self.name = name or ""
        """The producer's name (the broker's choice when none was asked for)."""
        self.last_sequence_id = -1
        """The broker's last stored sequence id for the name when the producer attached."""
        self.max_message_size = 0
        self._client = client
        self._user_named = name is not None
        self._max_pending = max(1, max_pending_messages)
        self._send_timeout = send_timeout_ms / 1000 if send_timeout_ms > 0 else None
        self._id = client.next_id()
        self._epoch = 0
        self._condition = threading.Condition()
        self._in_flight = 0
        self._error: Exception | None = None
        self._counts = ProducerCounts()
        # Only the client's loop touches these.
        self._pending: deque[_Pending] = deque()
        self._connection: BrokerConnection | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False

    @classmethod
    def create(
        cls,
        client: WireClient,
        topic: str,
        name: str | None,
        *,
        max_pending_messages: int = 10_000,
        send_timeout_ms: int = 30_000,
    ) -> EntryProducer:
        """Attach a producer to ``topic``; raises ``WireError`` if the broker refuses it or
        cannot be reached within the operation timeout."""
        producer = cls(client, topic, name, max_pending_messages, send_timeout_ms)
        client.run(producer._start())
        return producer

    # --- the caller's side ----------------------------------------------------------------
    def send(self, entry: OutgoingEntry) -> None:
        """Hand an entry over; blocks while ``max_pending_messages`` are unacknowledged."""
        with self._condition:
            while (
                self._error is None
                and self._in_flight > 0
                and self._in_flight + entry.messages > self._max_pending
            ):
                self._condition.wait(TIMEOUT_CHECK_SECONDS)
            if self._error is not None:
                raise self._error
            self._in_flight += entry.messages
        self._client.call_soon(self._enqueue, entry)

    def flush(self, timeout: float | None) -> ProducerCounts:
        """Wait until every entry sent is acknowledged; the counts, or the failure."""
        with self._condition:
            done = self._condition.wait_for(
                lambda: self._error is not None or self._in_flight == 0, timeout
            )
            if self._error is not None:
                raise self._error
            if not done:
                raise WireError(
                    f"{self._in_flight} messages to {self.topic} were not acknowledged "
                    f"within {timeout:.0f}s"
                )
            return ProducerCounts(self._counts.stored, self._counts.duplicates)

    def close(self) -> None:
        """Detach from the broker (what is unacknowledged stays unacknowledged)."""
        if not self._client.loop.is_closed():
            self._client.run(self._close(), timeout=CLOSE_TIMEOUT_SECONDS + 1)

    # --- on the client's loop -------------------------------------------------------------
    async def _start(self) -> None:
        await self._client.retrying(self._attach)
        self._timer = self._client.loop.call_later(TIMEOUT_CHECK_SECONDS, self._check_timeouts)

    async def _attach(self) -> None:
        connection = await self._client.lookup(self.topic)
        request_id = self._client.next_id()
        name = self.name or None
        answer = await connection.request(
            commands.producer(
                self.topic, self._id, request_id, name, self._user_named, self._epoch
            ),
            request_id,
        )
        if connection.closed:
            raise ConnectionClosedError(f"the connection to {connection.address} closed")
        success = answer.producer_success
        if self._connection is None and not self.name:
            self.name = success.producer_name
        if self._epoch == 0:
            self.last_sequence_id = success.last_sequence_id
        self.max_message_size = connection.max_message_size
        connection.producers[self._id] = self
        self._connection = connection
        for pending in self._pending:
            self._write(pending.entry)

    def _enqueue(self, entry: OutgoingEntry) -> None:
        if self._error is not None or self._closing:
            return
        timeout = self._send_timeout
        deadline = None if timeout is None else self._client.loop.time() + timeout
        self._pending.append(_Pending(entry, deadline))
        if self._connection is not None:
            self._write(entry)

    def _write(self, entry: OutgoingEntry) -> None:
        assert self._connection is not None
        command = commands.send(
            self._id, entry.sequence_id, entry.messages, entry.highest_sequence_id
        )
        head, block = payload_command_parts(command, entry.block)
        self._connection.write_parts([head, block])

    def frame_received(self, frame: Frame) -> None:
        command = frame.command
        if command.type == _BASE.SEND_RECEIPT:
            self._on_receipt(command.send_receipt)
        elif command.type == _BASE.SEND_ERROR:
            error = command.send_error
            if error.error == pb.ChecksumError:
                self._fail(WireError(f"{self.topic}: {error.message}", error.error))
            else:  # as the official clients do: a new connection, and everything resent
                log.info("%s: SEND failed (%s), resending", self.topic, error.message)
                self._drop_connection()
        elif command.type == _BASE.CLOSE_PRODUCER:
            log.info("%s: the broker closed producer %s, reattaching", self.topic, self.name)
            if self._connection is not None:
                self._connection.producers.pop(self._id, None)
            self._lost()

    def _on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        if not self._pending:
            return
        head = self._pending[0].entry
        if receipt.sequence_id < head.sequence_id:
            return  # the answer to an earlier copy of an entry already acknowledged
        if receipt.sequence_id > head.sequence_id:
            expected = head.sequence_id
            log.warning("%s: receipt for %d before %d", self.topic, receipt.sequence_id, expected)
            self._drop_connection()
            return
        self._pending.popleft()
        duplicate = as_signed64(receipt.message_id.entryId) < 0
        with self._condition:
            if duplicate:
                self._counts.duplicates += head.messages
            else:
                self._counts.stored += head.messages
            self._in_flight -= head.messages
            self._condition.notify_all()

    def connection_lost(self, connection: BrokerConnection) -> None:
        if connection is self._connection:
            self._lost()

    def _drop_connection(self) -> None:
        """Close the connection: every producer on it reattaches and resends."""
        if self._connection is not None:
            self._connection.close()

    def _lost(self) -> None:
        self._connection = None
        if self._closing or self._error is not None:
            return
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = self._client.loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Attach again until it works (the send timeout fails what waits too long).

        After a short pause, as the official clients do: a SEND refused because its first
        copy is still being written is only answered once that copy is stored."""
        await asyncio.sleep(FIRST_BACKOFF_SECONDS)
        try:
            await self._client.retrying(self._attach_again, math.inf)
        except WireError as exc:
            self._fail(exc)

    async def _attach_again(self) -> None:
        self._epoch += 1
        await self._attach()
        log.info("%s: producer %s attached again", self.topic, self.name)

    def _check_timeouts(self) -> None:
        if self._closing or self._error is not None:
            return
        now = self._client.loop.time()
        if self._pending and (deadline := self._pending[0].deadline) is not None and now > deadline:
            waiting = sum(p.entry.messages for p in self._pending)
            self._fail(
                WireError(
                    f"{waiting} messages to {self.topic} were not acknowledged within the "
                    f"send timeout ({self._send_timeout:.0f}s)",
                    retriable=True,
                )
            )
            return
        self._timer = self._client.loop.call_later(TIMEOUT_CHECK_SECONDS, self._check_timeouts)

    def _fail(self, error: WireError) -> None:
        log.warning("%s: producer %s failed: %s", self.topic, self.name, error)
        with self._condition:
            if self._error is None:
                self._error = error
            self._condition.notify_all()

    async def _close(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        connection, self._connection = self._connection, None
        self._pending.clear()
        if connection is None or connection.closed:
            return
        connection.producers.pop(self._id, None)
        await self._client.request_quietly(
            connection, lambda request_id: commands.close_producer(self._id, request_id)
        )
