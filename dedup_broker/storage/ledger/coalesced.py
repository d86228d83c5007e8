"""Background jobs of a managed ledger: one that many triggers may ask for at once, run
one at a time, and how any of them is cancelled when the ledger closes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class CoalescedJob(Generic[T]):
    """Runs ``job(target)`` in the background; a request while it runs makes it run once
    more.

    Trimming and offloading are asked for by rollovers, cursor moves, timers and admin
    calls; running them concurrently would race, and queueing every request would repeat
    work a single later run already covers.
    """

    # Every loaded topic holds two (trimming, offloading): the job is a plain function
    # and its target, not a bound method made per topic.
    __slots__ = ("_again", "_job", "_owner", "_target", "_task", "_what")

    def __init__(
        self, job: Callable[[T], Awaitable[object]], target: T, owner: str, what: str
    ) -> None:
        self._job = job
        self._target = target
        self._owner = owner  # joined with ``what`` only to log: no string per topic
        self._what = what
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def request(self) -> None:
        if self._task is not None:
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    await self._job(self._target)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("%s: %s failed: %s", self._owner, self._what, exc)
                if not self._again:
                    break
        finally:
            self._task = None

    async def cancel(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task, self._owner, self._what)


async def cancel_and_wait(task: asyncio.Task[None] | None, owner: str, what: str) -> None:
    """Cancel a background task of ``owner`` (a closing managed ledger) and wait for its
    end, whatever it ends with."""
    if task is not None:
        task.cancel()
        try:
            await task
        except BaseException as exc:
            log.debug("%s: %s ended at close: %r", owner, what, exc)
