"""A background loop every few seconds (the retention and backlog quota checks), stopped
cleanly on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from dedup_broker.errors import BrokerError

log = logging.getLogger(__name__)


class PeriodicTask:
    """Runs ``step`` every ``interval`` seconds (at least one) once started; a failing
    step (``BrokerError``) is logged and the loop goes on."""

    def __init__(self, name: str, interval: float, step: Callable[[], Awaitable[None]]) -> None:
        self._name = name
        self._interval = max(interval, 1.0)
        self._step = step
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._step()
            except BrokerError as exc:
                log.warning("%s: %s", self._name, exc)
