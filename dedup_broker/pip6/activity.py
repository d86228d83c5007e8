"""Which producers of a topic are active: a connected producer is never forgotten, an idle
one is after ``brokerDeduplicationProducerInactivityTimeoutMinutes``; snapshots keep the
most recently active ones when there are more than
``brokerDeduplicationMaxNumberOfProducers``."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping

_NONE_CONNECTED: dict[str, int] = {}
"""Shared by every topic with no producer connected (never written to)."""


class ProducerActivity:
    __slots__ = ("_clock", "_connected", "_last_active")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._last_active: dict[str, float] = {}
        self._connected = _NONE_CONNECTED

    def touch(self, name: str) -> None:
        self._last_active[name] = self._clock()

    def reset(self, names: list[str] | None = None) -> None:
        """Forget every time; ``names`` start active now."""
        now = self._clock()
        self._last_active = dict.fromkeys(names or (), now)

    def connected(self, name: str) -> None:
        if self._connected is _NONE_CONNECTED:
            self._connected = {}
        self._connected[name] = self._connected.get(name, 0) + 1
        self.touch(name)

    def disconnected(self, name: str, known: bool) -> None:
        """Inactivity is counted from the moment the last producer of that name left
        (``known``: the state has marks of it)."""
        count = self._connected.get(name, 0) - 1
        if count > 0:
            self._connected[name] = count
        else:
            self._connected.pop(name, None)
            if not self._connected:
                self._connected = _NONE_CONNECTED
        if known:
            self.touch(name)

    def idle(self, timeout_seconds: float) -> list[str]:
        """Producers not connected and not seen for ``timeout_seconds`` (none if <= 0)."""
        if timeout_seconds <= 0:
            return []
        deadline = self._clock() - timeout_seconds
        return [
            name
            for name, seen in self._last_active.items()
            if seen <= deadline and name not in self._connected
        ]

    def forget(self, name: str) -> None:
        self._last_active.pop(name, None)

    def newest(self, marks: Mapping[str, int], limit: int) -> dict[str, int]:
        """``marks`` of at most ``limit`` producers, the most recently active ones."""
        if len(marks) <= limit:
            return dict(marks)
        seen = self._last_active
        kept = heapq.nlargest(limit, marks, key=lambda n: seen.get(n, float("-inf")))
        return {name: marks[name] for name in kept}
