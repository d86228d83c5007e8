"""Answers to a producer's SENDs, sent in the order the SENDs came.

The official clients require receipts in order (a receipt for a later SEND first makes
them drop the connection). Under key deduplication a SEND may be answered at once (all
repeats), after its Kafka write, or only once *other* writes it depends on settled (its
repeats were dropped because an earlier write holds their keys). Each SEND takes a slot
when it is decided; a slot's answer leaves when it is ready and every earlier slot of
the same producer has left.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from dedup_broker.domain.producer import Producer

DEPENDENCY_LOST = (
    "a message of this batch was dropped as a repeat of a write that then failed; resend"
)


class Slot:
    __slots__ = ("command", "producer", "ready", "sequence_id")

    def __init__(self, producer: Producer, sequence_id: int) -> None:
        self.producer = producer
        self.sequence_id = sequence_id
        self.command: pb.BaseCommand | None = None
        self.ready = False


class OrderedReplies:
    def __init__(self) -> None:
        self._queues: dict[Producer, deque[Slot]] = {}

    def slot(self, producer: Producer, sequence_id: int) -> Slot:
        slot = Slot(producer, sequence_id)
        self._queues.setdefault(producer, deque()).append(slot)
        return slot

    def fill(
        self,
        slot: Slot,
        command: pb.BaseCommand,
        after: Sequence[asyncio.Future[bool]] = (),
    ) -> None:
        """``command`` answers the slot once every future in ``after`` is done; a
        receipt becomes a retriable error if any of them says its write was lost."""
        pending = [f for f in after if not f.done()]
        if not pending:
            self._ready(slot, command, after)
            return
        remaining = len(pending)

        def one_done(_: asyncio.Future[bool]) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                self._ready(slot, command, after)

        for future in pending:
            future.add_done_callback(one_done)

    def _ready(
        self, slot: Slot, command: pb.BaseCommand, after: Sequence[asyncio.Future[bool]]
    ) -> None:
        lost = any(f.cancelled() or not f.result() for f in after)
        if lost and command.type == pb.BaseCommand.SEND_RECEIPT:
            command = commands.send_error(
                slot.producer.producer_id, slot.sequence_id, pb.PersistenceError, DEPENDENCY_LOST
            )
        slot.command = command
        slot.ready = True
        self._flush(slot.producer)

    def _flush(self, producer: Producer) -> None:
        queue = self._queues.get(producer)
        while queue and queue[0].ready:
            slot = queue.popleft()
            if slot.command is not None and not producer.closed:
                producer.connection.send_command(slot.command)
        if queue is not None and not queue:
            del self._queues[producer]

    def forget(self, producer: Producer) -> None:
        self._queues.pop(producer, None)
