"""Many far deadlines that may fire a little late, behind one event-loop timer.

Every loaded topic keeps its ledger's rollover check armed for minutes or hours. With
``loop.call_later`` each one is a ``TimerHandle``, a bound method and a slot in the loop's
heap: about 190 bytes per topic, at 10,000 topics 1.9 MB for timers that rarely fire.
Here a deadline is one entry in the table of its tick (``resolution`` seconds, rounded
up: never early, at most one tick late), and the loop holds one timer, the earliest
tick's. Cancelling removes the entry, so a cancelled target is not kept alive.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from typing import Protocol

log = logging.getLogger(__name__)

DEFAULT_RESOLUTION_S = 0.25


class CoarseTimerTarget(Protocol):
    def on_coarse_timer(self) -> None:
        """The deadline passed (called once per ``arm``, unless cancelled)."""


Armed = dict[CoarseTimerTarget, None]
"""The tick a target waits in; keep it to cancel (``CoarseTimers.cancel``)."""


class CoarseTimers:
    """One schedule for a whole broker; every method runs on its event loop."""

    __slots__ = ("_done_tick", "_handle", "_handle_tick", "_ticks", "_waiting", "resolution")

    def __init__(self, resolution: float = DEFAULT_RESOLUTION_S) -> None:
        self.resolution = resolution
        self._waiting: dict[int, Armed] = {}
        """Targets by tick, each tick's in arming order."""
        self._ticks: list[int] = []
        """The ticks of ``_waiting``, a heap."""
        self._handle: asyncio.TimerHandle | None = None
        self._handle_tick = 0
        self._done_tick = 0
        """The last tick fired: a target armed again while it fires waits for a later one."""

    def arm(self, delay_s: float, target: CoarseTimerTarget) -> Armed:
        """Call ``target.on_coarse_timer()`` in ``delay_s`` seconds (rounded up to a tick)."""
        loop = asyncio.get_running_loop()
        tick = math.ceil((loop.time() + max(delay_s, 0.0)) / self.resolution)
        tick = max(tick, self._done_tick + 1)
        armed = self._waiting.get(tick)
        if armed is None:
            armed = self._waiting[tick] = {}
            heapq.heappush(self._ticks, tick)
            if self._handle is None or tick < self._handle_tick:
                self._wake_at(loop, tick)
        armed[target] = None
        return armed

    @staticmethod
    def cancel(armed: Armed, target: CoarseTimerTarget) -> None:
        armed.pop(target, None)

    def __len__(self) -> int:
        """Targets waiting."""
        return sum(len(armed) for armed in self._waiting.values())

    def _wake_at(self, loop: asyncio.AbstractEventLoop, tick: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle_tick = tick
        self._handle = loop.call_at(tick * self.resolution, self._fire)

    def _fire(self) -> None:
        self._handle = None
        loop = asyncio.get_running_loop()
        # The loop runs a timer up to its clock resolution early: the tick it was set for
        # is due even if the clock has not quite reached it.
        due = self._done_tick = max(self._handle_tick, math.floor(loop.time() / self.resolution))
        ticks = self._ticks
        while ticks and ticks[0] <= due:
            armed = self._waiting.pop(heapq.heappop(ticks))
            while armed:  # a target fired is removed first: it may arm itself again
                target = next(iter(armed))
                del armed[target]
                try:
                    target.on_coarse_timer()
                except Exception:
                    log.exception("a timer's callback failed")
        if ticks:
            self._wake_at(loop, ticks[0])
