"""Offloading one managed ledger's closed ledgers to tiered storage (Pulsar's offload).

An offload of a ledger, under the trimmer's lock (a ledger is never trimmed while it is
being offloaded):

1. a fresh uid is recorded in the ledger's entry of the list (``complete=false``), so a
   crash leaves a traceable attempt;
2. the entries are copied from Kafka into a self-describing copy written atomically;
3. the list records the copy as complete: reads go to tiered storage from then on.

An attempt that failed (or a crash left incomplete) is dropped through the deleter like
any copy: an ``OFFLOAD_LEDGER`` intent first, then the list update. After
``managedLedgerOffloadDeletionLagMs`` the Kafka copy of an offloaded ledger is deleted
the same way (a ``LEDGER`` intent, then the list records ``bookkeeperDeleted``); the
ledger stays listed and readable.

Offloads happen on request (:meth:`LedgerOffloads.trigger`, Pulsar's
``PUT .../offload``) and when the Kafka bytes of the managed ledger exceed the
``offloadThreshold`` policy (checked after each rollover and periodically).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import TYPE_CHECKING, Protocol

from dedup_broker.errors import (
    OffloadInProgressError,
    OffloadNotConfiguredError,
    StorageError,
)
from dedup_broker.lazy import LazyLock
from dedup_broker.storage.ledger.coalesced import CoalescedJob, cancel_and_wait
from dedup_broker.storage.values import (
    LedgerInfo,
    LedgerToDelete,
    OffloadedHeader,
    OffloadInfo,
    Position,
)

if TYPE_CHECKING:
    from dedup_broker.storage.api import LedgerPolicies
    from dedup_broker.storage.ledger.context import StorageContext
    from dedup_broker.storage.ledger.list_store import LedgerListStore
    from dedup_broker.storage.ledger.trimmer import WriteState
    from dedup_broker.storage.offload.filesystem import FilesystemOffloader

log = logging.getLogger(__name__)

NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"
_READ_ENTRIES = 1000
_READ_BYTES = 8 * 1024 * 1024


def _now_ms() -> int:
    return int(time.time() * 1000)


def over_threshold(
    ledgers: list[LedgerInfo],
    threshold_bytes: int,
    threshold_seconds: int = -1,
    now_ms: int | None = None,
) -> list[int]:
    """Closed ledgers to offload so that at most ``threshold_bytes`` stay only in Kafka
    (the newest ledgers are kept, every older one goes: Pulsar's offloadThreshold) and
    none closed more than ``threshold_seconds`` ago stays there (offloadThresholdInSeconds).
    A negative threshold turns its rule off, 0 offloads every closed ledger."""
    chosen: set[int] = set()
    if threshold_bytes >= 0:
        kept = 0
        crossed = False
        for info in reversed(ledgers):
            if info.offloaded:
                continue
            if info.is_open:
                kept += info.size
                continue
            if not crossed and kept + info.size <= threshold_bytes:
                kept += info.size
                continue
            crossed = True
            if info.entries > 0:
                chosen.add(info.ledger_id)
    if threshold_seconds >= 0:
        oldest = (_now_ms() if now_ms is None else now_ms) - threshold_seconds * 1000
        for info in ledgers:
            closed = not info.is_open and info.entries > 0
            if closed and not info.offloaded and info.timestamp_ms <= oldest:
                chosen.add(info.ledger_id)
    return sorted(chosen)


class OffloadableLedger(Protocol):
    """What offloading needs of a managed ledger."""

    name: str
    policies: LedgerPolicies | None

    @property
    def last_confirmed(self) -> Position: ...
    def ledgers(self) -> list[LedgerInfo]: ...
    def ledger_info(self, ledger_id: int) -> LedgerInfo | None: ...
    def next_position(self, position: Position) -> Position: ...


class LedgerOffloads(CoalescedJob):
    __slots__ = (
        "_ctx",
        "_ledger",
        "_list_store",
        "_lock",
        "_requested",
        "_timer",
        "_writes",
        "last_error",
        "status",
    )

    job_what = "offload housekeeping"

    def __init__(
        self,
        ledger: OffloadableLedger,
        list_store: LedgerListStore,
        writes: WriteState,
        ctx: StorageContext,
        lock: LazyLock,
    ) -> None:
        super().__init__()
        self._ledger = ledger
        self._list_store = list_store
        self._writes = writes
        self._ctx = ctx
        self._lock = lock
        """The trimmer's lock: a ledger is never offloaded while trimmed."""
        self.status = NOT_RUN
        self.last_error = ""
        self._timer: asyncio.TimerHandle | None = None
        self._requested: asyncio.Task[None] | None = None

    @property
    def job_owner(self) -> str:
        return self._ledger.name

    async def run_job(self) -> None:
        await self.check()

    @property
    def _offloader(self) -> FilesystemOffloader | None:
        return self._ctx.offloader

    # --- scheduling ---------------------------------------------------------------
    def on_open(self) -> None:
        """After opening: finish what a previous owner left (incomplete attempts, Kafka
        copies whose deletion lag passed)."""
        if any(info.offload is not None for info in self._ledger.ledgers()):
            self.check_soon()

    def check_soon(self) -> None:
        """Run :meth:`check` in the background (coalescing requests)."""
        if self._offloader is None:
            return
        self.request_job()

    async def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.cancel_job()
        task, self._requested = self._requested, None
        await cancel_and_wait(task, self._ledger.name, "offload")

    def _deletion_lag_ms(self) -> int:
        """The owner's ``offloadDeletionLagMs``, else ``managedLedgerOffloadDeletionLagMs``."""
        policies = self._ledger.policies
        if policies is None:
            return self._ctx.config.managed_ledger_offload_deletion_lag_ms
        return policies.offload_deletion_lag_ms()

    def _arm_timer(self) -> None:
        """Wake up when the next Kafka copy's deletion lag has passed."""
        lag = self._deletion_lag_ms()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if lag < 0:
            return
        due = [
            info.offload.timestamp_ms + lag
            for info in self._ledger.ledgers()
            if info.offload is not None and info.offloaded and info.in_kafka
        ]
        if due:
            delay = max(min(due) - _now_ms(), 0) / 1000 + 0.05
            self._timer = asyncio.get_running_loop().call_later(delay, self.check_soon)

    # --- the work -------------------------------------------------------------------
    async def check(self) -> None:
        """Drop failed attempts, apply the threshold policy, delete due Kafka copies."""
        if self._offloader is None:
            return
        ml = self._ledger
        async with self._lock:
            if not self._writes.is_writable_state():
                return
            await self._drop_incomplete()
            policies = ml.policies
            threshold = policies.offload_threshold() if policies is not None else -1
            seconds = policies.offload_threshold_seconds() if policies is not None else -1
            for ledger_id in over_threshold(ml.ledgers(), threshold, seconds):
                await self._offload(ledger_id)
            await self._delete_kafka_copies()
        self._arm_timer()

    def trigger(self, before: Position) -> None:
        """Offload every closed ledger before ``before``'s ledger, in the background
        (Pulsar's ``PUT .../offload``); :attr:`status` tells how it went."""
        if self._offloader is None:
            raise OffloadNotConfiguredError(
                "no offload driver is configured (managedLedgerOffloadDriver)"
            )
        if self.status == RUNNING:
            raise OffloadInProgressError(f"{self._ledger.name}: an offload is running")
        self.status, self.last_error = RUNNING, ""
        self._requested = asyncio.get_running_loop().create_task(self._offload_prefix(before))

    async def _offload_prefix(self, before: Position) -> None:
        ml = self._ledger
        try:
            async with self._lock:
                await self._drop_incomplete()
                for info in ml.ledgers():
                    if info.ledger_id >= before.ledger_id or info.is_open:
                        break
                    if not info.offloaded and info.entries > 0:
                        await self._offload(info.ledger_id)
            self.status = SUCCESS
        except asyncio.CancelledError:
            self.status, self.last_error = ERROR, "cancelled"
            raise
        except Exception as exc:
            self.status, self.last_error = ERROR, str(exc)
            log.warning("%s: offload failed: %s", ml.name, exc)
        finally:
            self._requested = None
        self._arm_timer()

    def first_unoffloaded(self) -> Position:
        """Pulsar's ``firstUnoffloadedMessage``: the first entry still only in Kafka."""
        for info in self._ledger.ledgers():
            if not info.offloaded and (info.entries > 0 or info.is_open):
                return Position(info.ledger_id, 0)
        return self._ledger.next_position(self._ledger.last_confirmed)

    async def _offload(self, ledger_id: int) -> None:
        offloader = self._offloader
        ml = self._ledger
        info = ml.ledger_info(ledger_id)
        if offloader is None or info is None or info.is_open or info.offloaded:
            return
        uid = str(uuid.uuid4())
        attempt = OffloadInfo(uid=uid, driver=offloader.driver)
        await self._list_store.update_offloads({ledger_id: attempt})
        try:
            await self._copy(offloader, info, uid)
            done = dataclasses.replace(attempt, complete=True, timestamp_ms=_now_ms())
            await self._list_store.update_offloads({ledger_id: done})
        except BaseException as exc:
            log.warning("%s: offloading ledger %d failed: %r", ml.name, ledger_id, exc)
            if not isinstance(exc, asyncio.CancelledError):
                try:
                    await self._drop(ledger_id, attempt)
                except Exception as drop_error:
                    log.warning("%s: dropping the failed offload: %s", ml.name, drop_error)
            raise
        log.info("%s: ledger %d offloaded (uid %s)", ml.name, ledger_id, uid)

    async def _copy(self, offloader: FilesystemOffloader, info: LedgerInfo, uid: str) -> None:
        header = OffloadedHeader(
            ledger_id=info.ledger_id,
            managed_ledger_name=self._ledger.name,
            component="MANAGED_LEDGER",
            cursor_name="",
            uid=uid,
            entries=info.entries,
            size=info.size,
            offloaded_ms=_now_ms(),
            offloaded_by=self._ctx.broker_id,
            cluster_name=self._ctx.config.cluster_name,
        )
        writer = await asyncio.to_thread(offloader.begin, header)
        try:
            entry_id = 0
            while entry_id < info.entries:
                wanted = min(info.entries - entry_id, _READ_ENTRIES)
                batch = await self._ctx.ledgers.read(info.ledger_id, entry_id, wanted, _READ_BYTES)
                if not batch:
                    raise StorageError(f"ledger {info.ledger_id}: entry {entry_id} unreadable")
                await asyncio.to_thread(writer.add, batch)
                entry_id += len(batch)
            await asyncio.to_thread(writer.finish)
        except BaseException:
            await asyncio.to_thread(writer.abort)
            raise

    async def _drop_incomplete(self) -> None:
        """Attempts recorded but never completed (failed, or a crash): drop their copies."""
        for info in self._ledger.ledgers():
            if info.offload is not None and not info.offload.complete:
                await self._drop(info.ledger_id, info.offload)

    async def _drop(self, ledger_id: int, attempt: OffloadInfo) -> None:
        """Two-phase removal of one offload attempt's copy; the ledger stays in Kafka."""
        ml = self._ledger
        target = LedgerToDelete(ml.name, ledger_id, kafka=False, offload=attempt)
        with self._ctx.pending_deletions.during(ml.name, [ledger_id]):
            if ledger_id not in await self._ctx.deleter.mark([target]):
                log.warning(
                    "%s: dropping offload %s of ledger %d: intent not stored",
                    ml.name,
                    attempt.uid,
                    ledger_id,
                )
                return
            info = ml.ledger_info(ledger_id)
            if info is not None and info.offload is not None and info.offload.uid == attempt.uid:
                await self._list_store.update_offloads({ledger_id: None})
            await self._ctx.deleter.after_metadata([target])

    async def _delete_kafka_copies(self) -> None:
        """Kafka copies of offloaded ledgers whose deletion lag has passed."""
        lag = self._deletion_lag_ms()
        if lag < 0:
            return
        ml = self._ledger
        now = _now_ms()
        due = [
            info
            for info in ml.ledgers()
            if info.offload is not None
            and info.offloaded
            and info.in_kafka
            and now - info.offload.timestamp_ms >= lag
        ]
        if not due:
            return
        targets = [LedgerToDelete(ml.name, info.ledger_id, kafka=True) for info in due]
        with self._ctx.pending_deletions.during(ml.name, [info.ledger_id for info in due]):
            accepted = await self._ctx.deleter.mark(targets)
            changes: dict[int, OffloadInfo | None] = {
                info.ledger_id: dataclasses.replace(info.offload, kafka_deleted=True)
                for info in due
                if info.ledger_id in accepted and info.offload is not None
            }
            if not changes:
                return
            await self._list_store.update_offloads(changes)
            await self._ctx.deleter.after_metadata([t for t in targets if t.ledger_id in changes])
        log.info("%s: Kafka copies of offloaded ledgers %s deleted", ml.name, sorted(changes))
