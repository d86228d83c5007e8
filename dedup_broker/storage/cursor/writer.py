"""Storing a durable cursor's state: rate-limited, and always the latest state eventually.

A cursor's state changes in memory at once; it is written to the cursor topic at most
``managedLedgerDefaultMarkDeleteRateLimit`` times per second, and a timer makes sure the
latest state is always written eventually. After a crash a cursor is therefore at most
one write interval behind, which means redelivery, never loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from dedup_broker.storage import formats
from dedup_broker.storage.values import Position

log = logging.getLogger(__name__)


class CursorStorage(Protocol):
    """Where a durable cursor's state goes (the cursor topic)."""

    async def write_cursor(self, name: str, data: bytes) -> None: ...


class CursorState(Protocol):
    """The cursor whose state is written."""

    def record(self) -> formats.CursorRecord: ...


class CursorWriter:
    __slots__ = (
        "_dirty",
        "_last_write_started",
        "_min_interval_s",
        "_name",
        "_source",
        "_storage",
        "_task",
        "_timer",
        "closed",
        "last_persisted_ms",
        "persisted_mark_delete_position",
    )

    def __init__(
        self,
        name: str,
        storage: CursorStorage,
        source: CursorState,
        *,
        rate_limit: float,
        persisted_at: Position | None,
        last_persisted_ms: int,
    ) -> None:
        """``persisted_at``: the mark-delete position as stored, None if the cursor was
        never stored (the first :meth:`flush` writes it)."""
        self._name = name
        self._storage = storage
        self._source = source
        self._min_interval_s = 1.0 / rate_limit
        self.persisted_mark_delete_position = persisted_at or Position(-1, -1)
        self.last_persisted_ms = last_persisted_ms
        persisted = persisted_at is not None
        self._last_write_started = time.monotonic() if persisted else float("-inf")
        self._dirty = not persisted
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.closed = False

    def changed(self) -> None:
        """The state changed: write it as soon as the rate limit allows."""
        if self.closed:
            return
        self._dirty = True
        self._schedule()

    def _schedule(self) -> None:
        if self._task is not None or self._timer is not None or self.closed:
            return
        wait = self._last_write_started + self._min_interval_s - time.monotonic()
        if wait <= 0:
            self._start()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty:
            self._schedule()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self) -> None:
        task = asyncio.get_running_loop().create_task(self._write())
        self._task = task
        task.add_done_callback(self._done)

    async def _write(self) -> None:
        self._dirty = False
        self._last_write_started = time.monotonic()
        record = self._source.record()
        try:
            await self._storage.write_cursor(self._name, formats.encode_cursor_info(record))
        except BaseException:
            self._dirty = True
            raise
        self.persisted_mark_delete_position = record.mark_delete
        self.last_persisted_ms = record.last_active_ms

    def _done(self, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("cursor %s: storing its position failed: %s", self._name, task.exception())
        if self._dirty and not self.closed:
            self._schedule()

    async def flush(self, changed: bool = False) -> None:
        """Store the current state now if it changed (``changed``: it did, whatever this
        writer knows); raises StorageError on failure."""
        if changed:
            self._dirty = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)
        if self._task is None and self._dirty:
            self._cancel_timer()
            self._start()
        if self._task is not None:
            await asyncio.shield(self._task)

    async def close(self) -> None:
        """Store the latest state and stop writing (used when the ledger closes)."""
        try:
            await self.flush()
        finally:
            self.closed = True
            self._cancel_timer()

    async def discard(self) -> None:
        """Stop writing without storing more; waits for a write in progress (deletion)."""
        self.closed = True
        self._cancel_timer()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)
