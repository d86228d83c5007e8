"""Changes to a managed ledger's stored list besides appends, and the one way to store it.

Trimming removes ledgers, offloading records tiered-storage copies, the owner sets
properties; every list (a rollover's and a recovery's too) is stored through
``_write_info``, under the list lock, so two writers never store lists computed from the
same old one. ``ManagedLedger`` extends this class; the trimmer and the offloads call
back into it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from dedup_broker.storage.context import StorageContext
from dedup_broker.storage.cursor_registry import CursorRegistry
from dedup_broker.storage.deletion import Retention
from dedup_broker.storage.info_store import LedgerInfoWriter
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.position import LedgerInfo, OffloadInfo, Position
from dedup_broker.storage.status import OPEN, LedgerStatus, LedgerType
from dedup_broker.storage.trimmer import LedgerTrimmer


class LedgerListUpdates:
    """Set by the subclass's constructor."""

    name: str
    _ctx: StorageContext
    _ledgers: LedgerList
    _list_lock: asyncio.Lock
    _info: LedgerInfoWriter
    _properties: dict[str, str]
    _trimmed: set[int]
    _state: str
    _closing: bool
    _cursors: CursorRegistry
    trimmer: LedgerTrimmer

    if TYPE_CHECKING:
        # Only declared: a stub at run time would hide the method of a later base class.
        def _check_open(self) -> None: ...

    # --- metadata record ------------------------------------------------------------
    async def _write_info(
        self, ledgers: list[LedgerInfo], properties: dict[str, str] | None = None
    ) -> None:
        # Trimmed ledgers never come back, and the offload state in memory wins, whatever
        # list a caller computed before.
        ledgers = [
            dataclasses.replace(info, offload=self._ledgers.offload_of(info.ledger_id))
            if self._ledgers.count(info.ledger_id) is not None
            else info
            for info in ledgers
            if info.ledger_id not in self._trimmed
        ]
        props = self._properties if properties is None else properties
        await self._info.write(ledgers, props)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    # --- trimming -------------------------------------------------------------------
    def is_writable_state(self) -> bool:
        return self._state == OPEN and not self._closing

    def durable_mark_deletes(self) -> list[Position]:
        """Mark-delete positions of every durable cursor, opened here or only stored."""
        return self._cursors.durable_mark_deletes()

    async def trim_consumed_ledgers(self, retention: Retention | None = None) -> list[int]:
        """Delete the ledgers every durable cursor passed and retention lets go."""
        return await self.trimmer.trim(retention)

    async def remove_ledgers(self, ledger_ids: set[int]) -> None:
        """Drop ledgers (their deletion is secured) from the list and store it."""
        current = self._ledgers.current
        if current is not None and current.ledger_id in ledger_ids:
            raise ValueError(f"{self.name}: the current ledger cannot be removed")
        async with self._list_lock:
            self._trimmed |= ledger_ids
            self._ledgers.remove(ledger_ids)
            self._ctx.cache.invalidate_ledgers(list(ledger_ids))
            await self._write_info(self._ledgers.infos())

    async def update_offloads(self, changes: dict[int, OffloadInfo | None]) -> None:
        """Record (or clear) tiered-storage copies of listed ledgers and store the list."""
        async with self._list_lock:
            for ledger_id, offload in changes.items():
                if self._ledgers.count(ledger_id) is not None:
                    self._ledgers.set_offload(ledger_id, offload)
            await self._write_info(self._ledgers.infos())

    def stored_views(self) -> list[list[LedgerInfo]]:
        """The ledger lists that may be the stored one."""
        return self._info.stored_views()

    def trimmed(self, ledger_id: int) -> bool:
        return ledger_id in self._trimmed

    async def store_trimmed_removal(self) -> None:
        """Write the list again if a removal of trimmed ledgers (or another change) was not
        stored."""
        async with self._list_lock:
            if self._trimmed & self._info.stored_ids() or self._info.unknown is not None:
                await self._write_info(self._ledgers.infos())

    def ledger_status(
        self, ledger_id: int, ledger_type: LedgerType = LedgerType.LEDGER, uid: str = ""
    ) -> LedgerStatus:
        """IN_USE (listed), PENDING (leaving the list, not stored yet) or DELETABLE, for
        the Kafka copy (``LEDGER``) or the tiered-storage copy ``uid`` (``OFFLOAD_LEDGER``)."""
        return self.trimmer.status(ledger_id, ledger_type, uid)

    async def set_properties(self, properties: dict[str, str]) -> None:
        """Replace the managed ledger's properties (stored with its ledger list)."""
        self._check_open()
        async with self._list_lock:
            await self._write_info(self._ledgers.infos(), dict(properties))
            self._properties = dict(properties)
