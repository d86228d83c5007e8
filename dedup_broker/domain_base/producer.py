"""A producer attached to a topic, and the link back to the client that created it."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from dedup_broker.domain_base.dates import pulsar_date
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.rates import SampledRates, average_size, rate


class ProducerAccessMode(enum.IntEnum):
    """Pulsar's producer access modes, valued as on the wire
    (``CommandProducer.producer_access_mode``)."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3


NO_METADATA: Mapping[str, str] = MappingProxyType({})
"""The properties of every producer and consumer that sent none (most): one shared."""


class ProducerLink(Protocol):
    """What the domain may ask of the client side of a producer (the session)."""

    @property
    def remote_address(self) -> str: ...

    def close_producer(self, producer: Producer, destination: Destination | None = None) -> None:
        """The broker closes the producer (topic unloaded): tell the client to reconnect,
        to ``destination`` once it is known (when given)."""


@dataclass(eq=False, slots=True)
class Producer:
    link: ProducerLink
    producer_id: int
    name: str
    user_provided_name: bool
    access_mode: ProducerAccessMode = ProducerAccessMode.SHARED
    topic_epoch: int | None = None
    """The epoch the client last held (it reconnects with it); ``None``: none yet."""
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msgs_in: int = 0
    bytes_in: int = 0
    pending_sends: int = 0
    closed: bool = False
    metadata: Mapping[str, str] = field(default_factory=lambda: NO_METADATA)
    """The producer's properties (``CommandProducer.metadata``)."""
    client_version: str = ""
    turn: asyncio.Future[BaseException | None] | None = None
    """While a SEND of this producer waits for its earlier copy (``domain.send_order``):
    resolves once it is past its wait; the producer's later SENDs wait for it."""
    write_failed: BaseException | None = None
    """Why a write of this producer failed, if one did: its SENDs waiting for an earlier
    copy fail too, rather than be written ahead of the failed one's resend."""
    rates: SampledRates | None = None
    """``msgs_in``, ``bytes_in`` per second over the last stats period (``topic_rates``)."""

    def stats(self) -> dict[str, object]:
        """Pulsar's ``PublisherStats`` (the fields the Java and Go admin models read)."""
        return {
            "producerId": self.producer_id,
            "producerName": self.name,
            "address": self.link.remote_address,
            "connectedSince": pulsar_date(self.created_ms),
            "clientVersion": self.client_version,
            "msgRateIn": rate(self.rates, 0),
            "msgThroughputIn": rate(self.rates, 1),
            "averageMsgSize": average_size(rate(self.rates, 1), rate(self.rates, 0)),
            "msgInCounter": self.msgs_in,
            "bytesInCounter": self.bytes_in,
            "pendingSends": self.pending_sends,
            "accessMode": _ACCESS_MODE_NAMES[self.access_mode],
            "supportsPartialProducer": False,
            "metadata": dict(self.metadata),
        }


_ACCESS_MODE_NAMES = {
    ProducerAccessMode.SHARED: "Shared",
    ProducerAccessMode.EXCLUSIVE: "Exclusive",
    ProducerAccessMode.WAIT_FOR_EXCLUSIVE: "WaitForExclusive",
    ProducerAccessMode.EXCLUSIVE_WITH_FENCING: "ExclusiveWithFencing",
}
