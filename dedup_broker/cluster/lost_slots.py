"""Slots lost with the group session, still served until the group says whose they are.

A broker's group session expires when Kafka answered none of its heartbeats for a session
timeout (a frozen or overloaded Kafka, a paused broker). Like Pulsar's ``reconnect``
policy for a lost metadata session, the broker keeps serving the lost slots while it
rejoins: the next assignment keeps those it gives back and ends the others. The write
fences keep the broker from storing anything in a slot another broker took meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dedup_broker.cluster.directory import ClusterView
from dedup_broker.cluster.membership import BrokerAddress

log = logging.getLogger(__name__)


class LostSlots:
    """The slots on hold, and the bound of the hold."""

    __slots__ = ("_expired", "_expiry", "bound_seconds", "held")

    def __init__(self, bound_seconds: float, expired: Callable[[frozenset[int]], None]) -> None:
        self.bound_seconds = bound_seconds
        """The longest hold: the group ends a rebalance within its rebalance timeout, so an
        assignment that has not come by then is not coming (while Kafka cannot be reached,
        nobody else can take the slots either)."""
        self._expired = expired
        self._expiry: asyncio.TimerHandle | None = None
        self.held: frozenset[int] = frozenset()

    def hold(self, slots: frozenset[int]) -> None:
        self.held = self.held | slots
        if self._expiry is None:
            self._expiry = asyncio.get_running_loop().call_later(self.bound_seconds, self._end)
        log.warning(
            "slots %s: group session lost; their topics stay loaded until the group says "
            "whose they are",
            sorted(slots),
        )

    def settle(self, back: frozenset[int]) -> frozenset[int]:
        """Ends the hold: the held slots that are not ``back`` with this broker."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        held, self.held = self.held, frozenset()
        if kept := held & back:
            log.info("slots %s: assigned here again; their topics stayed loaded", sorted(kept))
        return held - back

    def _end(self) -> None:
        self._expiry = None
        gone = self.settle(frozenset())
        if gone:
            log.warning("slots %s: not assigned again in time; unloading them", sorted(gone))
            self._expired(gone)


def earlier_seats(view: ClusterView, address: BrokerAddress, member_id: str | None) -> set[str]:
    """This process's own earlier member ids in the group: after its session expired it
    rejoined with a new id, and the group (which may not have expired the old one, e.g.
    when Kafka itself was frozen) holds the rebalance until the old seat rejoins, up to
    the rebalance timeout of minutes. Nothing while the current id is not known."""
    if member_id is None:
        return set()
    return {m for m, seat in view.members.items() if seat == address and m != member_id}
