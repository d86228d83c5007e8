from __future__ import annotations

import asyncio
import gc
import weakref

from dedup_broker.coarse_timers import CoarseTimers

RESOLUTION = 0.02


class Recorder:
    def __init__(self, name: str, fired: list[tuple[str, float]], fail: bool = False) -> None:
        self.name = name
        self.fired = fired
        self.fail = fail

    def on_coarse_timer(self) -> None:
        self.fired.append((self.name, asyncio.get_running_loop().time()))
        if self.fail:
            raise RuntimeError("boom")


async def test_deadlines_fire_in_order_never_early() -> None:
    timers = CoarseTimers(RESOLUTION)
    fired: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    late = Recorder("late", fired)
    first, second = Recorder("first", fired), Recorder("second", fired)
    timers.arm(0.15, late)
    timers.arm(0.05, first)  # earlier than the timer already set: the wake-up moves
    timers.arm(0.05, second)
    assert len(timers) == 3
    await asyncio.sleep(0.3)
    assert [name for name, _ in fired] == ["first", "second", "late"]
    at = dict(fired)
    assert at["first"] - start >= 0.05 - loop._clock_resolution  # type: ignore[attr-defined]
    assert at["first"] - start < 0.15
    assert at["late"] - start >= 0.15 - loop._clock_resolution  # type: ignore[attr-defined]
    assert len(timers) == 0


async def test_a_cancelled_target_neither_fires_nor_is_kept() -> None:
    timers = CoarseTimers(RESOLUTION)
    fired: list[tuple[str, float]] = []
    gone = Recorder("gone", fired)
    kept = Recorder("kept", fired)
    armed = timers.arm(0.05, gone)
    timers.arm(0.05, kept)
    CoarseTimers.cancel(armed, gone)
    ref = weakref.ref(gone)
    del gone
    gc.collect()
    assert ref() is None
    await asyncio.sleep(0.15)
    assert [name for name, _ in fired] == ["kept"]


async def test_a_target_armed_again_while_firing_fires_on_a_later_tick() -> None:
    timers = CoarseTimers(RESOLUTION)
    fired: list[float] = []

    class Again:
        def on_coarse_timer(self) -> None:
            fired.append(asyncio.get_running_loop().time())
            if len(fired) < 3:
                timers.arm(0.0, self)

    timers.arm(0.0, Again())
    await asyncio.sleep(0.2)
    assert len(fired) == 3
    assert fired[1] > fired[0] and fired[2] > fired[1]


async def test_a_failing_callback_does_not_stop_the_others() -> None:
    timers = CoarseTimers(RESOLUTION)
    fired: list[tuple[str, float]] = []
    timers.arm(0.02, Recorder("fails", fired, fail=True))
    timers.arm(0.02, Recorder("after", fired))
    timers.arm(0.08, Recorder("later", fired))
    await asyncio.sleep(0.2)
    assert [name for name, _ in fired] == ["fails", "after", "later"]
