"""The deduplication snapshot running in the background: at most one at a time, another
right after it while a full interval of entries waits, never after the state closed."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from dedup_broker.lazy import LazyLock

log = logging.getLogger(__name__)


class Snapshots(Protocol):
    """The deduplication state the task snapshots (an object, not two bound methods: one
    task per loaded topic)."""

    async def snapshot_once(self) -> bool:
        """Store one snapshot; False if there was nothing to store."""
        ...

    def snapshot_due(self) -> bool: ...


class SnapshotTask:
    __slots__ = ("_name", "_state", "_task", "closed", "failed", "lock", "stored")

    def __init__(self, name: str, state: Snapshots) -> None:
        self._name = name
        self._state = state
        self._task: asyncio.Task[None] | None = None
        self.lock = LazyLock()
        """Held while a snapshot is stored (and while the state is reset)."""
        self.closed = False
        self.stored = 0
        """Snapshots stored in the background (``/metrics``)."""
        self.failed = 0
        """Background snapshots that failed (``/metrics``: a snapshot alert)."""

    def start(self) -> None:
        """Starts a background snapshot unless one is already running."""
        if self.closed:
            return
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            # A full interval may have been persisted while one snapshot was being
            # stored; with no further entry nothing else would trigger the one due.
            state = self._state
            while await state.snapshot_once():
                self.stored += 1
                if not state.snapshot_due() or self.closed:
                    break
        except Exception as exc:
            self.failed += 1
            # Entries stay counted, so the next persisted entry or timer tick retries.
            log.warning("deduplication snapshot of %s failed: %s", self._name, exc)
        finally:
            if self._task is asyncio.current_task():
                self._task = None  # a finished task kept is 600 B on every published topic

    async def cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        """No more background snapshots; waits for the one running."""
        self.closed = True
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
