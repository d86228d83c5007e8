"""Trimming one managed ledger: consumed ledgers leave through the injected deleter.

A trim runs when asked (admin, retention timer, rollover, the slowest durable cursor
moving to another ledger); runs never overlap, and a request during a run causes one
more run after it. Order of a deletion: the deleter's ``mark`` (intents acknowledged),
then one metadata update removing exactly the accepted ledgers, then ``after_metadata``.
While that is in progress the ids are "pending" (see ``ManagedLedger.ledger_status``),
so a worker asking about them retries instead of deleting or giving up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from dedup_broker.storage.deletion import LedgerToDelete, Retention, consumed_ledgers, slowest

if TYPE_CHECKING:
    from dedup_broker.storage.context import StorageContext
    from dedup_broker.storage.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)


class LedgerTrimmer:
    def __init__(self, ledger: ManagedLedger, ctx: StorageContext) -> None:
        self._ledger = ledger
        self._ctx = ctx
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def trim_soon(self) -> None:
        """Run a trim in the background (coalescing requests)."""
        if self._task is not None:
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    await self.trim()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("%s: trimming failed: %s", self._ledger.name, exc)
                if not self._again:
                    break
        finally:
            self._task = None

    async def cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except BaseException as exc:
                log.debug("%s: trim ended at close: %r", self._ledger.name, exc)

    async def trim(self, retention: Retention | None = None) -> list[int]:
        """Delete the consumed ledgers retention lets go; returns their ids."""
        ml = self._ledger
        if retention is None:
            retention = ml.retention() if ml.retention is not None else Retention()
        async with self._lock:
            if not ml.is_writable_state():
                return []
            await ml.store_trimmed_removal()
            ids = consumed_ledgers(ml.ledgers(), slowest(ml.durable_mark_deletes()), retention)
            if not ids:
                return []
            return await self._delete(ids)

    async def delete_orphans(self, ids: list[int]) -> None:
        """Ledgers allocated to this managed ledger but never listed (a crash mid-create)."""
        if not ids:
            return
        async with self._lock:
            await self._delete(ids, listed=False)

    async def _delete(self, ids: list[int], listed: bool = True) -> list[int]:
        ml = self._ledger
        pending = self._ctx.pending_deletions.setdefault(ml.name, set())
        pending.update(ids)
        try:
            targets = [LedgerToDelete(ml.name, ledger_id) for ledger_id in ids]
            accepted = await self._ctx.deleter.mark(targets) & set(ids)
            if not accepted:
                return []
            if listed:
                await ml.remove_ledgers(accepted)
            await self._ctx.deleter.after_metadata([t for t in targets if t.ledger_id in accepted])
            log.info("%s: ledgers %s trimmed", ml.name, sorted(accepted))
            return sorted(accepted)
        finally:
            pending.difference_update(ids)
            if not pending:
                self._ctx.pending_deletions.pop(ml.name, None)
