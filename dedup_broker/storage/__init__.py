"""Storage on Kafka: managed ledgers, cursors and metadata tables (no protocol knowledge).

See ``docs/storage.md`` for the model, the record formats and the guarantees.
"""

from dedup_broker.storage.catalog import LedgerCatalog
from dedup_broker.storage.cursor import ManagedCursor
from dedup_broker.storage.managed_ledger import ManagedLedger
from dedup_broker.storage.metadata_table import MetadataTable
from dedup_broker.storage.position import Entry, LedgerInfo, Position
from dedup_broker.storage.service import StorageService
from dedup_broker.storage.status import LedgerStatus, LedgerType

__all__ = [
    "Entry",
    "LedgerCatalog",
    "LedgerInfo",
    "LedgerStatus",
    "LedgerType",
    "ManagedCursor",
    "ManagedLedger",
    "MetadataTable",
    "Position",
    "StorageService",
]
