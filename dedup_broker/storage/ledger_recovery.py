"""Recovering a managed ledger after a failed write: from "Fenced" to writable again.

Nothing is guessed after a failed, timed-out or misplaced write. Once every outstanding
delivery report came back, the current ledger is closed at the end Kafka really has
(records that landed although their report failed become visible entries), a fresh
ledger is listed, and ``on_write_failure_resolved`` hears what was told and what is
stored. Failures are retried with a growing delay; only a takeover by another broker
ends it. ``ManagedLedger`` extends this class.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from dedup_broker.errors import ManagedLedgerFencedError
from dedup_broker.lazy import LazyEvent
from dedup_broker.storage.context import StorageContext
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.position import LedgerInfo, Position
from dedup_broker.storage.status import OPEN

log = logging.getLogger(__name__)

_RETRY_MIN_S, _RETRY_MAX_S = 0.1, 5.0


class LedgerRecovery:
    """Set by the subclass's constructor."""

    name: str
    _ctx: StorageContext
    _ledgers: LedgerList
    _list_lock: asyncio.Lock
    _last_confirmed: Position
    _state: str
    _drained: LazyEvent
    _writable: LazyEvent
    _recovery_task: asyncio.Task[None] | None
    entries_added: int
    on_write_failure_resolved: Callable[[Position, Position], None] | None

    if TYPE_CHECKING:
        # Only declared: a stub at run time would hide the method of a later base class.
        async def _write_info(
            self, ledgers: list[LedgerInfo], properties: dict[str, str] | None = None
        ) -> None: ...
        def _start_ledger(self, ledger_id: int) -> None: ...
        def _schedule_notify(self) -> None: ...
        async def _shutdown(self, error: Exception) -> None: ...

    async def _recover(self, told: Position) -> None:
        delay = _RETRY_MIN_S
        await self._drained.wait()
        closed: LedgerInfo | None = None
        new_id: int | None = None
        current_id = self._ledgers.last_id
        fenced: ManagedLedgerFencedError | None = None
        async with self._list_lock:
            while True:
                try:
                    if closed is None:
                        closed = await self._ctx.ledgers.close_at_true_end(current_id)
                    if new_id is None:
                        new_id = await self._ctx.ledgers.create(self.name)
                    infos = [*self._ledgers.infos()[:-1], closed, LedgerInfo(new_id, -1, 0, 0)]
                    await self._write_info(infos)
                    self._apply_recovery(closed, new_id)
                    break
                except ManagedLedgerFencedError as exc:
                    fenced = exc
                    break
                except Exception as exc:
                    log.warning("%s: recovery failed, retrying in %.1fs: %s", self.name, delay, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _RETRY_MAX_S)
        if fenced is not None:
            await self._shutdown(fenced)
            return
        self._after_recovery(told)

    def _apply_recovery(self, closed: LedgerInfo, new_id: int) -> None:
        current_id = self._ledgers.last_id
        confirmed = self._ledgers.current_entries
        if closed.entries < confirmed:
            log.error(
                "%s: Kafka holds %d entries of ledger %d, %d were acknowledged",
                self.name,
                closed.entries,
                current_id,
                confirmed,
            )
        self.entries_added += max(closed.entries - confirmed, 0)
        self._ledgers.close_current(closed.entries, closed.size, closed.timestamp_ms)
        self._ledgers.add_open_ledger(new_id)
        self._last_confirmed = self._ledgers.last_confirmed()
        self._start_ledger(new_id)

    def _after_recovery(self, told: Position) -> None:
        self._recovery_task = None
        self._state = OPEN
        self._writable.set()
        truth = self._last_confirmed
        log.info("%s writable again: told up to %s, stored up to %s", self.name, told, truth)
        if truth != told:
            self._schedule_notify()
        if self.on_write_failure_resolved is not None:
            try:
                self.on_write_failure_resolved(told, truth)
            except Exception:
                log.exception("%s: on_write_failure_resolved failed", self.name)

    async def wait_writable(self) -> None:
        """Return once the managed ledger is not Fenced."""
        await self._writable.wait()
