"""The shared pieces every managed ledger of one broker uses (one instance per broker)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from dedup_broker.coarse_timers import CoarseTimers
from dedup_broker.config import BrokerConfig
from dedup_broker.storage.api import LedgerDeleter, MetadataTable, WriteFence
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.ledger.entry_cache import EntryCache
from dedup_broker.storage.ledger.ledger_store import LedgerStore
from dedup_broker.storage.ledger.pending import PendingDeletions
from dedup_broker.storage.ledger.rollover import RolloverPolicy
from dedup_broker.storage.offload.filesystem import FilesystemOffloader
from dedup_broker.storage.tables.metadata_table import KafkaMetadataTable, WritesThrough


@dataclass(frozen=True, slots=True)
class StorageContext:
    config: BrokerConfig
    producer: SharedProducer
    ledgers: LedgerStore
    cache: EntryCache
    managed_ledger_infos: KafkaMetadataTable
    cursor_infos: KafkaMetadataTable
    rollover: RolloverPolicy
    deleter: LedgerDeleter
    offloader: FilesystemOffloader | None = None
    """Tiered storage, when ``managedLedgerOffloadDriver`` is set."""
    broker_id: str = ""
    pending_deletions: PendingDeletions = field(default_factory=PendingDeletions)
    """Ledgers being deleted whose metadata update is not stored yet."""
    timers: CoarseTimers = field(default_factory=CoarseTimers)
    """The managed ledgers' rollover checks, in one schedule."""
    _fenced: weakref.WeakKeyDictionary[WriteFence, tuple[WritesThrough, WritesThrough]] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    def tables(self, fence: WriteFence | None) -> tuple[MetadataTable, MetadataTable]:
        """The managed-ledger and cursor tables as a managed ledger behind ``fence`` writes
        them (through the fence's transactions); one pair per fence, shared by its
        managed ledgers."""
        if fence is None:
            return self.managed_ledger_infos, self.cursor_infos
        tables = self._fenced.get(fence)
        if tables is None:
            tables = (
                WritesThrough(self.managed_ledger_infos, fence),
                WritesThrough(self.cursor_infos, fence),
            )
            self._fenced[fence] = tables
        return tables
