"""Background jobs of a managed ledger: one that many triggers may ask for at once, run
one at a time, and how any of them is cancelled when the ledger closes."""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

log = logging.getLogger(__name__)


class CoalescedJob:
    """The base of a part with one background job (``run_job``), run one at a time: a
    request while it runs makes it run once more.

    Trimming and offloading are asked for by rollovers, cursor moves, timers and admin
    calls; running them concurrently would race, and queueing every request would repeat
    work a single later run already covers. The part itself holds the job's state (two
    slots): every loaded topic has two such parts, and a separate job object each cost
    80 bytes.
    """

    __slots__ = ("_job_again", "_job_task")

    job_what: ClassVar[str] = "background job"
    """What the job does, for the log."""

    def __init__(self) -> None:
        self._job_task: asyncio.Task[None] | None = None
        self._job_again = False

    @property
    def job_owner(self) -> str:
        """Whose job it is (a managed ledger's name), for the log."""
        raise NotImplementedError

    async def run_job(self) -> None:
        raise NotImplementedError

    def request_job(self) -> None:
        if self._job_task is not None:
            self._job_again = True
            return
        self._job_task = asyncio.get_running_loop().create_task(self._run_jobs())

    async def _run_jobs(self) -> None:
        try:
            while True:
                self._job_again = False
                try:
                    await self.run_job()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("%s: %s failed: %s", self.job_owner, self.job_what, exc)
                if not self._job_again:
                    break
        finally:
            self._job_task = None

    async def cancel_job(self) -> None:
        task, self._job_task = self._job_task, None
        await cancel_and_wait(task, self.job_owner, self.job_what)


async def cancel_and_wait(task: asyncio.Task[None] | None, owner: str, what: str) -> None:
    """Cancel a background task of ``owner`` (a closing managed ledger) and wait for its
    end, whatever it ends with."""
    if task is not None:
        task.cancel()
        try:
            await task
        except BaseException as exc:
            log.debug("%s: %s ended at close: %r", owner, what, exc)
