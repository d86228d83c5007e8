"""The stored ledger list of one managed ledger, and every change made to it.

Rollovers and recoveries list new ledgers, closing records the current ledger's end,
trimming removes ledgers, offloading records tiered-storage copies and the owner sets
properties: each goes through :meth:`LedgerListStore.write` under :attr:`lock`, so two
writers never store lists computed from the same old one.
"""

from __future__ import annotations

import dataclasses

from dedup_broker.lazy import LazyLock
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.entry_cache import EntryCache
from dedup_broker.storage.ledger.info_store import LedgerInfoWriter
from dedup_broker.storage.ledger.ledger_store import now_ms
from dedup_broker.storage.values import LedgerInfo, OffloadInfo

_NONE_TRIMMED: frozenset[int] = frozenset()


_NO_PROPERTIES: dict[str, str] = {}
"""Shared by every list without properties (replaced, never written to)."""


class LedgerListStore:
    __slots__ = ("_cache", "_confirmed", "_info", "_properties", "_trimmed", "lock", "name")

    def __init__(
        self,
        name: str,
        confirmed: ConfirmedLedgers,
        info: LedgerInfoWriter,
        cache: EntryCache,
    ) -> None:
        self.name = name
        self._confirmed = confirmed
        self._info = info
        self._cache = cache
        self._properties = _NO_PROPERTIES
        self._trimmed = _NONE_TRIMMED
        """Ids removed from the list: never listed again, whatever list a writer computed
        (a frozenset: every list that never trimmed shares one empty set)."""
        self.lock = LazyLock()
        """Held from computing a new list to applying it: two writers (a rollover and an
        offload, say) must never store lists computed from the same old one."""

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def opened(self, properties: dict[str, str]) -> None:
        """The properties of the list as opened."""
        self._properties = dict(properties) if properties else _NO_PROPERTIES

    async def write(
        self, ledgers: list[LedgerInfo], properties: dict[str, str] | None = None
    ) -> None:
        """Store ``ledgers`` (the caller holds :attr:`lock`). Trimmed ledgers never come
        back, and the offload state in memory wins, whatever list the caller computed."""
        current = self._confirmed.ledgers
        ledgers = [
            dataclasses.replace(info, offload=current.offload_of(info.ledger_id))
            if current.count(info.ledger_id) is not None
            else info
            for info in ledgers
            if info.ledger_id not in self._trimmed
        ]
        props = self._properties if properties is None else properties
        await self._info.write(ledgers, props)

    def closing_current(self) -> LedgerInfo:
        """The current ledger as closed now, at the entries acknowledged so far."""
        ledgers = self._confirmed.ledgers
        return LedgerInfo(ledgers.last_id, ledgers.current_entries, ledgers.current_size, now_ms())

    def with_current(self, closed: LedgerInfo, new_id: int | None = None) -> list[LedgerInfo]:
        """The list with its current ledger replaced by ``closed`` (and ``new_id`` open)."""
        infos = [*self._confirmed.ledgers.infos()[:-1], closed]
        if new_id is not None:
            infos.append(LedgerInfo(new_id, -1, 0, 0))
        return infos

    def with_next(self, new_id: int) -> list[LedgerInfo]:
        """The list (its ledgers all closed) with ``new_id`` listed open after them."""
        return [*self._confirmed.ledgers.infos(), LedgerInfo(new_id, -1, 0, 0)]

    async def set_properties(self, properties: dict[str, str]) -> None:
        """Replace the properties (stored with the list)."""
        async with self.lock:
            await self.write(self._confirmed.ledgers.infos(), dict(properties))
            self._properties = dict(properties) if properties else _NO_PROPERTIES

    # --- trimming and offloading ------------------------------------------------------
    async def remove_ledgers(self, ledger_ids: set[int]) -> None:
        """Drop ledgers (their deletion is secured) from the list and store it."""
        ledgers = self._confirmed.ledgers
        current = ledgers.current
        if current is not None and current.ledger_id in ledger_ids:
            raise ValueError(f"{self.name}: the current ledger cannot be removed")
        async with self.lock:
            self._trimmed |= ledger_ids
            self._confirmed.remove(ledger_ids)
            self._cache.invalidate_ledgers(list(ledger_ids))
            await self.write(ledgers.infos())

    async def update_offloads(self, changes: dict[int, OffloadInfo | None]) -> None:
        """Record (or clear) tiered-storage copies of listed ledgers and store the list."""
        ledgers = self._confirmed.ledgers
        async with self.lock:
            for ledger_id, offload in changes.items():
                if ledgers.count(ledger_id) is not None:
                    ledgers.set_offload(ledger_id, offload)
            await self.write(ledgers.infos())

    def stored_views(self) -> list[list[LedgerInfo]]:
        """The ledger lists that may be the stored one."""
        return self._info.stored_views()

    def trimmed(self, ledger_id: int) -> bool:
        return ledger_id in self._trimmed

    async def store_trimmed_removal(self) -> None:
        """Write the list again if a removal of trimmed ledgers (or another change) was not
        stored."""
        async with self.lock:
            if self._trimmed & self._info.stored_ids() or self._info.unknown is not None:
                await self.write(self._confirmed.ledgers.infos())
