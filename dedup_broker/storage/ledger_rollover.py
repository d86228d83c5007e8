"""Rolling a managed ledger over: closing the current ledger and listing the next one.

The rules are ``rollover.py``'s, checked on every append and on a timer armed for the
moment age alone may change the answer. A rollover waits until every append in flight is
acknowledged (appends meanwhile queue in call order), then stores the list with the
current ledger closed and a fresh one open, and sends what queued. ``ManagedLedger``
extends this class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dedup_broker.errors import ManagedLedgerFencedError
from dedup_broker.lazy import LazyDeque
from dedup_broker.storage.context import StorageContext
from dedup_broker.storage.deletion import Retention
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.ledger_store import now_ms
from dedup_broker.storage.offload_manager import LedgerOffloads
from dedup_broker.storage.position import LedgerInfo
from dedup_broker.storage.status import OPEN
from dedup_broker.storage.trimmer import LedgerTrimmer

if TYPE_CHECKING:
    from dedup_broker.storage.managed_ledger import _Append

log = logging.getLogger(__name__)


class LedgerRollover:
    """Set by the subclass's constructor."""

    name: str
    _ctx: StorageContext
    _loop: asyncio.AbstractEventLoop
    _ledgers: LedgerList
    _list_lock: asyncio.Lock
    _state: str
    _closing: bool
    _inflight: LazyDeque[_Append]
    _queued: LazyDeque[_Append]
    _next_entry_id: int
    _produced_size: int
    _ledger_started: float
    _rolling: bool
    _roll_task: asyncio.Task[None] | None
    _rollover_timer: asyncio.TimerHandle | None
    trimmer: LedgerTrimmer
    offloads: LedgerOffloads
    retention: Callable[[], Retention] | None

    if TYPE_CHECKING:
        # Only declared: a stub at run time would hide the method of a later base class.
        async def _write_info(
            self, ledgers: list[LedgerInfo], properties: dict[str, str] | None = None
        ) -> None: ...
        def _start_ledger(self, ledger_id: int) -> None: ...
        def _send(self, op: _Append) -> None: ...
        def _fence(self, error: BaseException, culprit: _Append | None = None) -> None: ...
        async def _shutdown(self, error: Exception) -> None: ...

    def _age_ms(self) -> float:
        return (time.monotonic() - self._ledger_started) * 1000

    def _rollover_due(self) -> bool:
        return self._ctx.rollover.should_rollover(
            self._next_entry_id, self._produced_size, self._age_ms()
        )

    def _arm_rollover_timer(self) -> None:
        self._cancel_rollover_timer()
        wait_ms = self._ctx.rollover.next_check_in_ms(self._age_ms())
        if wait_ms is not None:
            self._rollover_timer = self._loop.call_later(wait_ms / 1000, self._on_rollover_timer)

    def _cancel_rollover_timer(self) -> None:
        if self._rollover_timer is not None:
            self._rollover_timer.cancel()
            self._rollover_timer = None

    def _on_rollover_timer(self) -> None:
        self._rollover_timer = None
        if self._state != OPEN or self._closing or self._rolling:
            return
        if self._rollover_due():
            self._begin_rollover()
        else:
            self._arm_rollover_timer()

    def _begin_rollover(self) -> None:
        self._rolling = True
        self._cancel_rollover_timer()
        if not self._inflight and self._roll_task is None:
            self._roll_task = self._loop.create_task(self._roll())

    async def _roll(self) -> None:
        """Close the current ledger (everything in it is acknowledged) and open the next."""
        try:
            new_id = await self._ctx.ledgers.create(self.name)
            async with self._list_lock:
                closed = LedgerInfo(
                    self._ledgers.last_id,
                    self._ledgers.current_entries,
                    self._ledgers.current_size,
                    now_ms(),
                )
                await self._write_info(
                    [*self._ledgers.infos()[:-1], closed, LedgerInfo(new_id, -1, 0, 0)]
                )
                self._ledgers.close_current(closed.entries, closed.size, closed.timestamp_ms)
                self._ledgers.add_open_ledger(new_id)
                self._start_ledger(new_id)
        except ManagedLedgerFencedError as exc:
            self._roll_task = None
            await self._shutdown(exc)
            return
        except Exception as exc:
            self._roll_task = None
            self._fence(exc)
            return
        self._roll_task = None
        self._rolling = False
        log.debug("%s rolled over to ledger %d", self.name, new_id)
        if self.retention is not None:
            self.trimmer.trim_soon()
        self.offloads.check_soon()
        while self._queued and self._state == OPEN and not self._rolling:
            if self._rollover_due():
                self._begin_rollover()
                break
            self._send(self._queued.popleft())
