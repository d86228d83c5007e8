"""A producer attached to a topic through one client connection."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dedup_broker.domain.topic import Topic
    from dedup_broker.session.connection import ClientConnection


@dataclass(eq=False)
class Producer:
    """Holds what the publish path needs to answer this producer."""

    connection: ClientConnection
    producer_id: int
    name: str
    topic: Topic
    user_provided_name: bool
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msgs_in: int = 0
    bytes_in: int = 0
    pending_sends: int = 0
    closed: bool = False

    @property
    def address(self) -> str:
        return self.connection.remote_address

    def stats(self) -> dict[str, object]:
        return {
            "producerId": self.producer_id,
            "producerName": self.name,
            "address": self.address,
            "connectedSince": self.created_ms,
            "msgInCounter": self.msgs_in,
            "bytesInCounter": self.bytes_in,
            "pendingSends": self.pending_sends,
        }
