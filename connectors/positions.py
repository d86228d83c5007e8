"""Message positions that can be compared, stored in a database and turned back into ids.

A position is ``(ledger_id, entry_id, batch_index)`` inside one topic partition; positions
of different partitions are never compared. Messages that were not batched carry batch
index -1; an entry is either a batch or a single message, so tuple order is log order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulsar


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where a message sits in its partition's log; ordered as the log is."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    @classmethod
    def of(cls, message_id: pulsar.MessageId) -> Position:
        return cls(message_id.ledger_id(), message_id.entry_id(), message_id.batch_index())

    @property
    def is_before_everything(self) -> bool:
        """True for ``NOTHING``: no message of the partition has been processed."""
        return self == NOTHING

    def message_id(self, partition: int = -1) -> pulsar.MessageId:
        """The official client's id for exactly this message."""
        return pulsar.MessageId(partition, self.ledger_id, self.entry_id, self.batch_index)

    def entry_start(self, partition: int = -1) -> pulsar.MessageId:
        """The id of the start of this message's entry (its whole batch).

        Readers resume from here, inclusively, and skip what they already processed: the
        whole entry is delivered again whatever a broker or client does with batch indexes.
        """
        return pulsar.MessageId(partition, self.ledger_id, self.entry_id, -1)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"


NOTHING = Position(-1, -1, -1)
"""Before every message: what a partition's stored position is when nothing was applied."""


def partition_index(topic: str) -> int:
    """The partition number in ``...-partition-N`` names, -1 for a non-partitioned topic."""
    head, sep, tail = topic.rpartition("-partition-")
    if sep and head and tail.isdigit():
        return int(tail)
    return -1
