"""The background snapshot of one topic: every due snapshot stored, nothing kept once done."""

from __future__ import annotations

import asyncio

from dedup_broker.pip6.snapshot_task import SnapshotTask


class CountingState:
    def __init__(self, due: int) -> None:
        self.due = due
        self.stored = 0

    async def snapshot_once(self) -> bool:
        await asyncio.sleep(0)
        self.stored += 1
        self.due -= 1
        return True

    def snapshot_due(self) -> bool:
        return self.due > 0


async def test_stores_each_due_snapshot_then_keeps_no_task() -> None:
    state = CountingState(due=3)
    task = SnapshotTask("t", state)
    task.start()
    task.start()  # one already running: not a second one
    for _ in range(20):
        await asyncio.sleep(0)
    assert state.stored == 3
    assert task._task is None  # a finished task is not kept (memory per loaded topic)
    state.due = 1
    task.start()
    await task.close()
    assert state.stored == 4
