"""A consumer attached to a subscription through one client connection."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dedup_broker.protocol import commands
from dedup_broker.protocol.framing import encode_payload_command

if TYPE_CHECKING:
    from dedup_broker.domain.subscription import Subscription
    from dedup_broker.session.connection import ClientConnection
    from dedup_broker.storage.position import Entry, Position


@dataclass(eq=False)
class Consumer:
    """Permits, messages in flight and counters of one consumer."""

    connection: ClientConnection
    consumer_id: int
    name: str
    subscription_name: str
    priority_level: int = 0
    permits: int = 0
    pending: dict[Position, int] = field(default_factory=dict)
    """Entries sent and not yet acknowledged -> number of messages in the entry."""
    unacked_messages: int = 0
    epoch: int = 0
    partition_index: int = -1
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msgs_out: int = 0
    bytes_out: int = 0
    closed: bool = False
    subscription: Subscription = field(init=False)

    @property
    def writable(self) -> bool:
        return not self.closed and self.connection.writable

    def send_entries(self, batch: list[tuple[Entry, int, int]]) -> None:
        """Send ``(entry, messages in entry, redelivery count)`` tuples in one write.

        Permits were charged by the dispatcher when it chose this consumer.
        """
        frames = []
        for entry, count, redeliveries in batch:
            position = entry.position
            command = commands.message(
                self.consumer_id,
                position.ledger_id,
                position.entry_id,
                redelivery_count=redeliveries,
                # As Pulsar does: ids then match GET_LAST_MESSAGE_ID's, which the client
                # compares them with (hasMessageAvailable on a partition's reader).
                partition=self.partition_index,
                consumer_epoch=self.epoch if self.epoch else None,
            )
            frames.append(encode_payload_command(command, entry.data))
            self.pending[position] = count
            self.unacked_messages += count
            self.msgs_out += count
            self.bytes_out += len(entry.data)
        self.connection.write_bytes(b"".join(frames))

    def forget(self, position: Position) -> bool:
        """Drop a position from the in-flight set; True if it was there."""
        count = self.pending.pop(position, None)
        if count is None:
            return False
        self.unacked_messages -= count
        return True

    def forget_up_to(self, position: Position) -> None:
        for pos in [p for p in self.pending if p <= position]:
            self.forget(pos)

    def take_pending(self) -> list[Position]:
        """Every in-flight position, clearing the set (for redelivery)."""
        positions = list(self.pending)
        self.pending.clear()
        self.unacked_messages = 0
        return positions

    def stats(self) -> dict[str, object]:
        return {
            "consumerName": self.name,
            "address": self.connection.remote_address,
            "connectedSince": self.created_ms,
            "availablePermits": self.permits,
            "unackedMessages": self.unacked_messages,
            "msgOutCounter": self.msgs_out,
            "bytesOutCounter": self.bytes_out,
            "priorityLevel": self.priority_level,
        }
