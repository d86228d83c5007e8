"""Trimming one managed ledger: consumed ledgers leave through the injected deleter.

A trim runs when asked (admin, retention timer, rollover, the slowest durable cursor
moving to another ledger); runs never overlap, and a request during a run causes one
more run after it. Order of a deletion: the deleter's ``mark`` (intents acknowledged),
then one metadata update removing exactly the accepted ledgers, then ``after_metadata``.
While that is in progress the ids are "pending" (``pending.py``, :meth:`LedgerTrimmer.status`),
so a worker asking about them retries instead of deleting or giving up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from dedup_broker.lazy import LazyLock
from dedup_broker.storage.ledger.coalesced import CoalescedJob
from dedup_broker.storage.ledger.deletion import consumed_ledgers, slowest, targets_for
from dedup_broker.storage.values import LedgerStatus, LedgerToDelete, LedgerType, Retention

if TYPE_CHECKING:
    from dedup_broker.storage.api import LedgerCursors, LedgerPolicies
    from dedup_broker.storage.ledger.context import StorageContext
    from dedup_broker.storage.ledger.list_store import LedgerListStore
    from dedup_broker.storage.values import LedgerInfo

log = logging.getLogger(__name__)


class WriteState(Protocol):
    """The write side, asked whether this instance still writes the managed ledger (a
    reference to it rather than a bound method per topic)."""

    def is_writable_state(self) -> bool: ...


class TrimmableLedger(Protocol):
    """What trimming needs of a managed ledger's read side."""

    name: str
    policies: LedgerPolicies | None

    def ledgers(self) -> list[LedgerInfo]: ...
    def ledger_info(self, ledger_id: int) -> LedgerInfo | None: ...
    @property
    def cursors(self) -> LedgerCursors: ...


class LedgerTrimmer(CoalescedJob):
    __slots__ = ("_ctx", "_ledger", "_list_store", "_writes", "lock")

    job_what = "trimming"

    def __init__(
        self,
        ledger: TrimmableLedger,
        list_store: LedgerListStore,
        writes: WriteState,
        ctx: StorageContext,
    ) -> None:
        super().__init__()
        self._ledger = ledger
        self._list_store = list_store
        self._writes = writes
        """Trims run only while the managed ledger takes appends (not fenced, not closing)."""
        self._ctx = ctx
        self.lock = LazyLock()
        """Held by trims and offloads alike: a ledger is never offloaded while trimmed."""

    @property
    def job_owner(self) -> str:
        return self._ledger.name

    async def run_job(self) -> None:
        await self.trim()

    def trim_soon(self) -> None:
        """Run a trim in the background (coalescing requests)."""
        self.request_job()

    def cursor_moved(self) -> None:
        """The slowest durable cursor may have passed a ledger (or gone)."""
        if self._ledger.policies is not None and self._writes.is_writable_state():
            self.trim_soon()

    async def cancel(self) -> None:
        await self.cancel_job()

    async def trim(self, retention: Retention | None = None) -> list[int]:
        """Delete the consumed ledgers retention lets go; returns their ids."""
        ml = self._ledger
        if retention is None:
            retention = ml.policies.retention() if ml.policies is not None else Retention()
        async with self.lock:
            if not self._writes.is_writable_state():
                return []
            await self._list_store.store_trimmed_removal()
            ids = consumed_ledgers(
                ml.ledgers(),
                slowest(ml.cursors.durable_mark_deletes()),
                retention,
                last_may_go=self._ctx.rollover.lazy,
            )
            if not ids:
                return []
            return await self._delete(ids)

    async def delete_orphans(self, ids: list[int]) -> list[int]:
        """Ledgers allocated to this managed ledger but never listed (a crash mid-create);
        the ids whose deletion is secured."""
        if not ids:
            return []
        async with self.lock:
            return await self._delete(ids, listed=False)

    async def _delete(self, ids: list[int], listed: bool = True) -> list[int]:
        ml = self._ledger
        with self._ctx.pending_deletions.during(ml.name, ids):
            if listed:
                wanted = set(ids)
                targets = targets_for(ml.name, [i for i in ml.ledgers() if i.ledger_id in wanted])
            else:
                targets = [LedgerToDelete(ml.name, ledger_id) for ledger_id in ids]
            accepted = await self._ctx.deleter.mark(targets) & set(ids)
            if not accepted:
                return []
            if listed:
                await self._list_store.remove_ledgers(accepted)
            await self._ctx.deleter.after_metadata([t for t in targets if t.ledger_id in accepted])
            log.info("%s: ledgers %s trimmed", ml.name, sorted(accepted))
            return sorted(accepted)

    # --- questions of deletion workers ----------------------------------------------
    def status(self, ledger_id: int, ledger_type: LedgerType, uid: str) -> LedgerStatus:
        """May a worker delete this copy of ``ledger_id``: IN_USE (listed), PENDING
        (leaving the list, not stored yet) or DELETABLE, for the Kafka copy (``LEDGER``) or
        the tiered-storage copy ``uid`` (``OFFLOAD_LEDGER``)."""
        ml, store = self._ledger, self._list_store
        current = ml.ledger_info(ledger_id)
        stored = [
            next((i for i in view if i.ledger_id == ledger_id), None)
            for view in store.stored_views()
        ]
        if ledger_type is LedgerType.OFFLOAD_LEDGER:
            uids = {i.offload.uid for i in (current, *stored) if i is not None and i.offload}
            if uid not in uids:
                return LedgerStatus.DELETABLE
            if current is None or current.offload is None or current.offload.uid != uid:
                return LedgerStatus.PENDING  # leaving the list, not stored yet
            return LedgerStatus.IN_USE
        if current is not None:
            # A listed ledger's Kafka copy may go once its offload is complete and the
            # deletion of that copy is recorded, in memory and in what is stored.
            if current.offloaded and not current.in_kafka:
                if all(i is None or not i.in_kafka for i in stored):
                    return LedgerStatus.DELETABLE
                return LedgerStatus.PENDING
            return LedgerStatus.IN_USE
        if any(i is not None for i in stored):
            return LedgerStatus.PENDING if store.trimmed(ledger_id) else LedgerStatus.IN_USE
        return LedgerStatus.DELETABLE
