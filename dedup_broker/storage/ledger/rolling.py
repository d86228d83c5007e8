"""Rolling a managed ledger over: closing the current ledger and listing the next one.

The rules are ``rollover.py``'s, checked on every append and on a timer armed for the
moment age alone may change the answer. A rollover waits until every append in flight is
acknowledged (appends meanwhile queue in call order), then stores the list with the
current ledger closed and a fresh one open, and sends what queued.

With ``managedLedgerInactiveLedgerRolloverTimeSeconds`` ledgers are created lazily: the
timer also closes a ledger nothing was appended to for that long, a roll the timer
starts only closes, and the append that finds no open ledger creates the next one.
"""

from __future__ import annotations

import asyncio
import logging
import time

from dedup_broker.coarse_timers import Armed, CoarseTimers
from dedup_broker.errors import ManagedLedgerFencedError
from dedup_broker.storage.ledger.appends import AppendPipeline, WriteEvents
from dedup_broker.storage.ledger.coalesced import cancel_and_wait
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.context import StorageContext
from dedup_broker.storage.ledger.list_store import LedgerListStore

log = logging.getLogger(__name__)


class LedgerRollover:
    """The rollover of one managed ledger: its timer and the roll itself."""

    __slots__ = (
        "_appends",
        "_confirmed",
        "_create_next",
        "_ctx",
        "_events",
        "_list_store",
        "_loop",
        "_started",
        "_task",
        "_timer",
        "name",
        "rolling",
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
        self._loop = asyncio.get_running_loop()
        self._started = time.monotonic()
        self.rolling = False
        """Set from the decision to roll until the next ledger is listed."""
        self._create_next = True
        """The roll under way lists a fresh ledger (False: it only closes the current)."""
        self._task: asyncio.Task[None] | None = None
        self._timer: Armed | None = None
        """Where the rollover check waits in the broker's schedule (one per loaded topic:
        not a loop timer each)."""

    def _age_ms(self) -> float:
        return (time.monotonic() - self._started) * 1000

    def due(self) -> bool:
        """An append must wait for a roll: the current ledger is done, or there is none."""
        if self._confirmed.ledgers.current is None:
            return True
        appends = self._appends
        return self._ctx.rollover.should_rollover(
            appends.next_entry_id, appends.produced_size, self._age_ms()
        )

    def started(self) -> None:
        """A fresh ledger takes the appends from now on."""
        self._started = time.monotonic()
        self._arm_timer()

    def _arm_timer(self) -> None:
        self.cancel_timer()
        policy = self._ctx.rollover
        wait_ms = policy.next_check_in_ms(self._age_ms())
        if policy.lazy:
            idle_wait_ms = max(policy.inactive_ms - self._appends.idle_ms(), 1.0)
            wait_ms = idle_wait_ms if wait_ms is None else min(wait_ms, idle_wait_ms)
        if wait_ms is not None:
            self._timer = self._ctx.timers.arm(wait_ms / 1000, self)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            CoarseTimers.cancel(self._timer, self)
            self._timer = None

    def on_coarse_timer(self) -> None:
        self._timer = None
        appends, policy = self._appends, self._ctx.rollover
        if not appends.is_writable_state() or self.rolling:
            return
        if self._confirmed.ledgers.current is None:
            return  # closed already: the next append creates a ledger
        if policy.inactive(appends.next_entry_id, appends.idle_ms()):
            log.info("%s: closing its inactive ledger", self.name)
            self.begin(create_next=False)
        elif self.due():
            self.begin(create_next=not policy.lazy)
        else:
            self._arm_timer()

    def begin(self, create_next: bool = True) -> None:
        self.rolling = True
        self._create_next = create_next
        self.cancel_timer()
        if not self._appends.inflight and self._task is None:
            self._task = self._loop.create_task(self._roll())

    def drained(self) -> None:
        """Every append in flight settled: a pending rollover goes ahead."""
        if self.rolling and self._task is None:
            self._task = self._loop.create_task(self._roll())

    async def _roll(self) -> None:
        """Close the current ledger, if any (everything in it is acknowledged), and open
        the next unless this roll only closes."""
        store, confirmed = self._list_store, self._confirmed
        try:
            new_id = await self._ctx.ledgers.create(self.name) if self._create_next else None
            async with store.lock:
                if confirmed.ledgers.current is not None:
                    closed = store.closing_current()
                    await store.write(store.with_current(closed, new_id))
                    confirmed.close_current(closed.entries, closed.size, closed.timestamp_ms)
                elif new_id is not None:
                    await store.write(store.with_next(new_id))
                if new_id is not None:
                    confirmed.add_open_ledger(new_id)
                    self._appends.start_ledger(new_id)
                else:
                    self._appends.no_ledger()
        except ManagedLedgerFencedError as exc:
            self._task = None
            await self._events.lost(exc)
            return
        except Exception as exc:
            self._task = None
            self._appends.fence(exc)
            return
        self._task = None
        self.rolling = False
        self._create_next = True
        log.debug("%s rolled over to ledger %s", self.name, new_id)
        self._events.rolled()
        self._appends.send_queued()

    async def cancel(self) -> None:
        """Closing: no more rollovers; one under way is abandoned."""
        self.rolling = False
        self.cancel_timer()
        task, self._task = self._task, None
        await cancel_and_wait(task, self.name, "rollover")
