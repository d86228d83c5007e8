"""The shared pieces every managed ledger of one broker uses (one instance per broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dedup_broker.config import BrokerConfig
from dedup_broker.storage.deletion import LedgerDeleter
from dedup_broker.storage.entry_cache import EntryCache
from dedup_broker.storage.kafka_producer import SharedProducer
from dedup_broker.storage.ledger_store import LedgerStore
from dedup_broker.storage.metadata_table import MetadataTable
from dedup_broker.storage.offload_fs import FilesystemOffloader
from dedup_broker.storage.rollover import RolloverPolicy


@dataclass(frozen=True, slots=True)
class StorageContext:
    config: BrokerConfig
    producer: SharedProducer
    ledgers: LedgerStore
    cache: EntryCache
    managed_ledger_infos: MetadataTable
    cursor_infos: MetadataTable
    rollover: RolloverPolicy
    deleter: LedgerDeleter
    offloader: FilesystemOffloader | None = None
    """Tiered storage, when ``managedLedgerOffloadDriver`` is set."""
    broker_id: str = ""
    pending_deletions: dict[str, set[int]] = field(default_factory=dict)
    """Per managed ledger: ids being deleted whose metadata update is not stored yet."""
