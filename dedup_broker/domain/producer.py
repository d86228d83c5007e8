"""A producer attached to a topic, and the link back to the client that created it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol


class ProducerLink(Protocol):
    """What the domain may ask of the client side of a producer (the session)."""

    @property
    def remote_address(self) -> str: ...

    def close_producer(self, producer: Producer) -> None:
        """The broker closes the producer (topic unloaded): tell the client to reconnect."""


@dataclass(eq=False)
class Producer:
    link: ProducerLink
    producer_id: int
    name: str
    user_provided_name: bool
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msgs_in: int = 0
    bytes_in: int = 0
    pending_sends: int = 0
    closed: bool = False

    def stats(self) -> dict[str, object]:
        return {
            "producerId": self.producer_id,
            "producerName": self.name,
            "address": self.link.remote_address,
            "connectedSince": self.created_ms,
            "msgInCounter": self.msgs_in,
            "bytesInCounter": self.bytes_in,
            "pendingSends": self.pending_sends,
        }
