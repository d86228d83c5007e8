"""The shared pieces every managed ledger of one broker uses (one instance per broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dedup_broker.config import BrokerConfig
from dedup_broker.storage.api import LedgerDeleter
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.ledger.entry_cache import EntryCache
from dedup_broker.storage.ledger.ledger_store import LedgerStore
from dedup_broker.storage.ledger.pending import PendingDeletions
from dedup_broker.storage.ledger.rollover import RolloverPolicy
from dedup_broker.storage.offload.filesystem import FilesystemOffloader
from dedup_broker.storage.tables.metadata_table import KafkaMetadataTable


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
