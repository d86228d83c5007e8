"""Delayed delivery (``deliver_at`` / ``deliver_after``) for Shared and Key_Shared
subscriptions, as Pulsar does it: an entry whose metadata names a ``deliver_at_time`` still
in the future is held back by position until it is due, while the entries behind it are
dispatched; due positions return to the subscription's redelivery set.

Nothing is stored: a held entry is not acknowledged, so after a restart (or a handover)
the cursor reads it again and it is held again until its time.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable

from dedup_broker.errors import BrokerError
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import Entry, Position


def deliver_at_ms(entry: Entry) -> int | None:
    """The entry's ``deliver_at_time`` (epoch ms), if it has one."""
    try:
        metadata = parse_metadata_only(entry.data)
    except BrokerError:
        return None
    return metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None


class DelayedDelivery:
    def __init__(
        self, on_due: Callable[[list[Position]], None], clock: Callable[[], float] = time.time
    ) -> None:
        self._on_due = on_due
        self._clock = clock
        self._due: list[tuple[int, Position]] = []
        self._held: dict[Position, None] = {}
        """A set, as a dict: empty, under a third of the size (every subscription has one)."""
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, entry: Entry) -> bool:
        """Whether the entry waits (its time has not come); it is released when due."""
        if entry.position in self._held:
            return True
        due = deliver_at_ms(entry)
        if due is None or due <= self._clock() * 1000:
            return False
        self._held[entry.position] = None
        heapq.heappush(self._due, (due, entry.position))
        self._schedule()
        return True

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._due:
            return
        wait = max(self._due[0][0] / 1000 - self._clock(), 0.0)
        self._timer = asyncio.get_running_loop().call_later(wait, self._release)

    def _release(self) -> None:
        self._timer = None
        now_ms = self._clock() * 1000
        released = []
        while self._due and self._due[0][0] <= now_ms:
            _, position = heapq.heappop(self._due)
            if position in self._held:
                del self._held[position]
                released.append(position)
        self._schedule()
        if released:
            self._on_due(released)

    def clear(self) -> None:
        """The cursor moved (a seek): what it reads again is held again if still early."""
        self._held.clear()
        self._due.clear()
        self._schedule()
