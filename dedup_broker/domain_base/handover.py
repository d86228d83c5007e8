"""Where the clients of an unloaded topic are sent (Pulsar's PIP-307).

When a topic leaves a broker gracefully (an unload, its slot moving to another broker,
the broker leaving), its producers and consumers are closed with the address of the
broker that serves it next (``assignedBrokerServiceUrl`` in CLOSE_PRODUCER and
CLOSE_CONSUMER); the official clients then connect there at once instead of looking the
topic up again after a back-off. The address may be known only after the slot's new
owner has been assigned, so it is a future: until it resolves the clients stay attached
and their SENDs unanswered (they resend them on the new connection).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServiceUrls:
    """A broker's Pulsar URLs, as lookups name them."""

    service_url: str
    service_url_tls: str | None = None


Destination = asyncio.Future[ServiceUrls | None]
"""The broker a topic's clients go to next; ``None``: unknown (they look it up)."""


def known(urls: ServiceUrls | None) -> Destination:
    """A destination known now."""
    future: Destination = asyncio.get_running_loop().create_future()
    future.set_result(urls)
    return future


def outcome(destination: Destination) -> ServiceUrls | None:
    """The resolved destination (``None`` if it failed or was cancelled)."""
    if destination.cancelled() or destination.exception() is not None:
        return None
    return destination.result()
