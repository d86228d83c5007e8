"""Writing one managed ledger's ``ManagedLedgerInfo`` record, with the takeover check.

Kafka offers no compare-and-set, so before each write the stored record is re-read and
compared with the last one this instance wrote (or tried to: a write whose outcome is
unknown may have landed). A difference means another broker wrote: nothing more is
written and the caller is told (``ManagedLedgerFencedError``).
"""

from __future__ import annotations

from dedup_broker.errors import ManagedLedgerFencedError
from dedup_broker.lazy import LazyLock
from dedup_broker.storage import formats
from dedup_broker.storage.api import MetadataTable
from dedup_broker.storage.values import LedgerInfo


class LedgerInfoWriter:
    __slots__ = ("_lock", "_name", "_table", "last", "last_listed", "unknown")

    def __init__(self, name: str, table: MetadataTable) -> None:
        self._name = name
        self._table = table
        self._lock = LazyLock()
        self.last: bytes | None = None
        """What this instance last wrote (or found at open)."""
        self.unknown: bytes | None = None
        """A write whose outcome is unknown (it may be the stored one)."""
        self.last_listed = -1
        """The highest ledger id the stored list ever held (kept when trimmed away)."""

    async def write(self, ledgers: list[LedgerInfo], properties: dict[str, str]) -> None:
        async with self._lock:
            await self._table.refresh()
            stored = self._table.get(self._name)
            if stored != self.last and (self.unknown is None or stored != self.unknown):
                raise ManagedLedgerFencedError(
                    f"managed ledger {self._name} was changed by another broker"
                )
            record = formats.ManagedLedgerRecord(ledgers, properties, self.last_listed)
            data = formats.encode_managed_ledger_info(record)
            self.unknown = data
            await self._table.put(self._name, data)
            self.last, self.unknown = data, None
            self.last_listed = record.last_listed_id

    def stored_views(self) -> list[list[LedgerInfo]]:
        """The ledger lists that may be the stored one (last written, outcome unknown)."""
        return [
            formats.decode_managed_ledger_info(data).ledgers
            for data in (self.last, self.unknown)
            if data is not None
        ]

    def stored_ids(self) -> set[int]:
        return {info.ledger_id for view in self.stored_views() for info in view}
