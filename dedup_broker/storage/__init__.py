"""Storage on Kafka: managed ledgers, cursors and metadata tables (no protocol knowledge).

See ``docs/storage.md`` for the model, the record formats and the guarantees.
"""

from dedup_broker.storage.cursor import ManagedCursor
from dedup_broker.storage.managed_ledger import ManagedLedger
from dedup_broker.storage.metadata_table import MetadataTable
from dedup_broker.storage.position import Entry, LedgerInfo, Position
from dedup_broker.storage.service import StorageService

__all__ = [
    "Entry",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedLedger",
    "MetadataTable",
    "Position",
    "StorageService",
]
