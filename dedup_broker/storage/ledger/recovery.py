"""Recovering a managed ledger after a failed write: from "Fenced" to writable again.

Nothing is guessed after a failed, timed-out or misplaced write. Once every outstanding
delivery report came back, the current ledger is closed at the end Kafka really has
(records that landed although their report failed become visible entries), a fresh
ledger is listed, and the owner hears what was told and what is stored. Failures are
retried with a growing delay; only a takeover by another broker ends it.
"""

from __future__ import annotations

import asyncio
import logging

from dedup_broker.errors import ManagedLedgerFencedError, OwnershipLostError
from dedup_broker.storage.ledger.appends import AppendPipeline, WriteEvents
from dedup_broker.storage.ledger.coalesced import cancel_and_wait
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.context import StorageContext
from dedup_broker.storage.ledger.list_store import LedgerListStore
from dedup_broker.storage.values import LedgerInfo, Position

log = logging.getLogger(__name__)

_RETRY_MIN_S, _RETRY_MAX_S = 0.1, 5.0


class WriteRecovery:
    __slots__ = (
        "_appends",
        "_confirmed",
        "_ctx",
        "_events",
        "_list_store",
        "_task",
        "name",
    )

    def __init__(
        self,
        ctx: StorageContext,
        confirmed: ConfirmedLedgers,
        list_store: LedgerListStore,
        appends: AppendPipeline,
        events: WriteEvents,
    ) -> None:
        self.name = list_store.name
        self._ctx = ctx
        self._confirmed = confirmed
        self._list_store = list_store
        self._appends = appends
        self._events = events
        self._task: asyncio.Task[None] | None = None

    def start(self, told: Position) -> None:
        """Recover in the background; ``told`` is the last position clients heard of."""
        self._task = asyncio.get_running_loop().create_task(self._recover(told))

    async def cancel(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task, self.name, "recovery")

    async def _recover(self, told: Position) -> None:
        delay = _RETRY_MIN_S
        await self._appends.drained.wait()
        closed: LedgerInfo | None = None
        new_id: int | None = None
        current_id = self._confirmed.ledgers.last_id
        fenced: ManagedLedgerFencedError | OwnershipLostError | None = None
        store = self._list_store
        async with store.lock:
            while True:
                try:
                    if closed is None:
                        # What Kafka acknowledged at its place needs no second look.
                        verified = told.entry_id + 1 if told.ledger_id == current_id else 0
                        closed = await self._ctx.ledgers.close_at_true_end(current_id, verified)
                    if new_id is None:
                        new_id = await self._ctx.ledgers.create(self.name)
                    await store.write(store.with_current(closed, new_id))
                    self._confirmed.close_current(closed.entries, closed.size, closed.timestamp_ms)
                    self._confirmed.add_open_ledger(new_id)
                    self._appends.start_ledger(new_id)
                    break
                except (ManagedLedgerFencedError, OwnershipLostError) as exc:
                    # Another broker took over: nothing here may write any more.
                    fenced = exc
                    break
                except Exception as exc:
                    log.warning("%s: recovery failed, retrying in %.1fs: %s", self.name, delay, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _RETRY_MAX_S)
        if fenced is not None:
            await self._events.lost(fenced)
            return
        self._task = None
        self._appends.reopen()
        truth = self._confirmed.last
        log.info("%s writable again: told up to %s, stored up to %s", self.name, told, truth)
        if truth != told:
            self._confirmed.notify_soon()
        try:
            self._events.resolved(told, truth)
        except Exception:
            log.exception("%s: on_write_failure_resolved failed", self.name)
