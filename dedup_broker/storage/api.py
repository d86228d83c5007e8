"""The storage layer's one door: what the rest of the broker may know of storage.

Protocols (``ManagedLedger``, ``ManagedCursor``, ``MetadataTable``, ``StorageService``,
``LedgerCatalog``, ...) and the value types they speak in (``Position``, ``Entry``,
``LedgerInfo``, ...). Every module outside ``dedup_broker/storage`` imports storage from
here; only the composition roots (``app.py``, the deletion worker's ``wiring.py``) build
the implementations (``storage/service/``), as Pulsar keeps its ``ManagedLedger``
interfaces apart from their ``impl``. The rooms behind the door: ``kafka/`` (Kafka
clients and write fences), ``tables/`` (metadata tables on compacted topics),
``cursor/``, ``offload/`` (tiered storage), ``ledger/`` (the managed ledger and its
collaborators) and ``service/`` (what a broker or a deletion worker opens).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from dedup_broker.storage.formats import broker_key, broker_record, uid_from_longs, uid_to_longs
from dedup_broker.storage.values import (
    COMPACTED_TOPIC_PROPERTY,
    COMPACTION_CURSOR,
    CURSOR_KEY_SEPARATOR,
    DEFAULT_MAX_BYTES,
    FILESYSTEM_OFFLOAD_DRIVER,
    MB,
    OFFLOAD_TEMP_SUFFIX,
    SYSTEM_CURSOR_PREFIX,
    Entry,
    EntryVisitor,
    FetchedRecord,
    LedgerHeaderError,
    LedgerInfo,
    LedgerMetadata,
    LedgerState,
    LedgerStatus,
    LedgerToDelete,
    LedgerType,
    OffloadedHeader,
    OffloadInfo,
    Position,
    ReadLimited,
    Retention,
    StoredCopy,
    is_system_cursor,
    is_valid_managed_ledger_name,
    readable_end,
)

__all__ = [
    "COMPACTED_TOPIC_PROPERTY",
    "COMPACTION_CURSOR",
    "CURSOR_KEY_SEPARATOR",
    "DEFAULT_MAX_BYTES",
    "FILESYSTEM_OFFLOAD_DRIVER",
    "MB",
    "OFFLOAD_TEMP_SUFFIX",
    "SYSTEM_CURSOR_PREFIX",
    "CompactedTopics",
    "Entry",
    "EntryReads",
    "EntryVisitor",
    "FetchedRecord",
    "LedgerCatalog",
    "LedgerCursors",
    "LedgerDeleter",
    "LedgerHeaderError",
    "LedgerInfo",
    "LedgerMetadata",
    "LedgerOffloads",
    "LedgerPositions",
    "LedgerState",
    "LedgerStatus",
    "LedgerToDelete",
    "LedgerTrimming",
    "LedgerType",
    "LedgerUsage",
    "ManagedCursor",
    "ManagedLedger",
    "MetadataTable",
    "OffloadInfo",
    "OffloadStore",
    "OffloadedHeader",
    "Position",
    "ReadLimited",
    "RecordSender",
    "Retention",
    "StorageService",
    "StoredCopy",
    "TopicCreator",
    "WriteFence",
    "broker_key",
    "broker_record",
    "is_system_cursor",
    "is_valid_managed_ledger_name",
    "readable_end",
    "uid_from_longs",
    "uid_to_longs",
]


# --- metadata tables ------------------------------------------------------------------
class MetadataTable(Protocol):
    """A compacted topic read as a key -> value table (policies, cursors, ledger lists)."""

    def get(self, key: str) -> bytes | None: ...

    def items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        """Entries whose key starts with ``prefix``, sorted by key."""
        ...

    def __len__(self) -> int: ...

    async def refresh(self) -> None:
        """Read what other writers (other brokers) stored since."""

    async def put(self, key: str, value: bytes) -> None:
        """Returns once Kafka acknowledged the write."""

    async def delete(self, key: str) -> None: ...


class RecordSender(Protocol):
    """Writes records to Kafka topics (the shared producer, a write fence)."""

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int = -1,
        timestamp_ms: int = 0,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[int]:
        """The future gives the record's offset once Kafka acknowledged it."""
        ...


class TopicCreator(Protocol):
    async def create_topic(
        self, topic: str, config: Mapping[str, str], partitions: int = 1
    ) -> bool:
        """Create ``topic``; False if it already existed."""
        ...


# --- cursors --------------------------------------------------------------------------
class ManagedCursor(Protocol):
    """What one subscription has acknowledged, and where it reads next."""

    name: str
    durable: bool
    properties: dict[str, int]
    """Set with the last explicit mark-delete (the PIP-6 snapshot lives here)."""

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def persisted_mark_delete_position(self) -> Position:
        """The mark-delete position last stored (durable cursors)."""
        ...

    @property
    def last_persisted_ms(self) -> int: ...

    @property
    def read_position(self) -> Position: ...

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]: ...

    def is_acknowledged(self, p: Position) -> bool: ...

    def batch_ack_set(self, p: Position) -> tuple[int, ...]: ...

    def batch_acks(self) -> dict[Position, tuple[int, ...]]: ...

    def backlog(self) -> int: ...

    def has_more_entries(self) -> bool: ...

    async def read_entries(self, max_entries: int, max_bytes: int = ...) -> list[Entry]: ...

    def rewind(self) -> None: ...

    def seek(self, read_position: Position) -> None: ...

    def mark_delete(self, p: Position, properties: dict[str, int] | None = None) -> None: ...

    def delete(self, positions: Sequence[Position]) -> None: ...

    def delete_batch_indexes(self, p: Position, unacked: Sequence[int]) -> bool: ...

    async def reset(self, p: Position) -> None: ...

    async def flush(self) -> None: ...


class LedgerCursors(Protocol):
    """The cursors of one managed ledger (``ManagedLedger.cursors``)."""

    async def open(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """The durable cursor ``name``: its stored state if it exists, else a new one at
        ``"latest"`` or ``"earliest"``, stored before this returns."""
        ...

    def new_non_durable(
        self, start: Position | None, inclusive: bool = False, name: str = ""
    ) -> ManagedCursor:
        """A cursor kept in memory only (readers)."""
        ...

    async def delete(self, name: str) -> None: ...

    def opened(self) -> Mapping[str, ManagedCursor]:
        """The durable cursors opened on this instance."""
        ...

    def exists(self, name: str) -> bool:
        """True for a durable cursor that is stored (opened here or not)."""
        ...

    def stored_names(self) -> list[str]: ...

    def durable_mark_deletes(self) -> list[Position]: ...


# --- managed ledgers ------------------------------------------------------------------
class LedgerPositions(Protocol):
    """Position arithmetic over a managed ledger's ledgers, answered from memory."""

    @property
    def last_confirmed(self) -> Position: ...

    def first_position(self) -> Position: ...

    def next_position(self, p: Position) -> Position: ...

    def previous_position(self, p: Position) -> Position: ...

    def normalize_position(self, p: Position) -> Position:
        """The first position at or after ``p`` that exists or will be written next."""
        ...

    def is_valid_position(self, p: Position) -> bool: ...

    def number_of_entries(self) -> int: ...

    def entries_between(self, start: Position, end: Position) -> int: ...

    def ledgers(self) -> list[LedgerInfo]: ...

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None: ...

    @property
    def total_size(self) -> int: ...


class EntryReads(LedgerPositions, Protocol):
    """Reading a managed ledger's entries (what a cursor needs of its ledger)."""

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]:
        """Entries from ``start`` on, never beyond ``last_confirmed``."""
        ...

    async def scan_entries(
        self, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Hands entries' data to ``visit`` in a worker thread (replays)."""
        ...

    async def read_entry(self, position: Position) -> Entry: ...

    async def find_position_by_time(self, timestamp_ms: int) -> Position: ...

    def add_entries_listener(self, callback: Callable[[], None]) -> None:
        """``callback`` runs whenever ``last_confirmed`` advances."""
        ...

    def remove_entries_listener(self, callback: Callable[[], None]) -> None:
        """``callback`` (or one equal to it, as a bound method of the same object is) runs
        no more; nothing happens if it was not added."""
        ...


class LedgerTrimming(Protocol):
    """Deleting the ledgers every durable cursor passed and retention lets go
    (``ManagedLedger.trimmer``)."""

    def trim_soon(self) -> None:
        """Trim in the background (requests meanwhile coalesce into one more run)."""

    async def trim(self, retention: Retention | None = None) -> list[int]:
        """Trim now (``retention`` None: the managed ledger's own); the ledgers deleted."""
        ...


class LedgerPolicies(Protocol):
    """What the owner's policies say about one managed ledger, asked each time they
    matter (they change at run time)."""

    def retention(self) -> Retention:
        """How long consumed ledgers are kept (trimming)."""
        ...

    def offload_threshold(self) -> int:
        """``offloadThreshold`` in bytes (negative: off)."""
        ...

    def offload_threshold_seconds(self) -> int:
        """``offloadThresholdInSeconds`` (negative: off)."""
        ...

    def offload_deletion_lag_ms(self) -> int:
        """``offloadDeletionLagMs``: how long a ledger's Kafka copy outlives its offload
        (negative: forever)."""
        ...


class LedgerOffloads(Protocol):
    """A managed ledger's offloads to tiered storage (``ManagedLedger.offloads``)."""

    status: str
    last_error: str

    def check_soon(self) -> None: ...

    def trigger(self, before: Position) -> None: ...

    def first_unoffloaded(self) -> Position: ...


class ManagedLedger(EntryReads, Protocol):
    """One topic's ordered list of ledgers: appends, reads, cursors (Pulsar's
    ``ManagedLedger``)."""

    name: str
    on_write_failure_resolved: Callable[[Position, Position], None] | None
    """Told ``(told, stored)`` once the ledger is writable again after a failed write."""
    policies: LedgerPolicies | None
    """Set by the owner to trim and offload automatically; None: only when asked."""
    read_limit: Position | None
    """Set by the owner: cursors read no entry after it (Pulsar's max read position:
    transactions not yet committed lie beyond); None: up to ``last_confirmed``. Entries
    listeners are not told when it rises: the owner wakes its readers."""

    @property
    def entries_added(self) -> int:
        """Entries confirmed since this instance opened the managed ledger."""
        ...

    @property
    def cursors(self) -> LedgerCursors: ...

    @property
    def trimmer(self) -> LedgerTrimming: ...

    @property
    def offloads(self) -> LedgerOffloads: ...

    @property
    def state(self) -> LedgerState: ...

    @property
    def properties(self) -> dict[str, str]: ...

    async def set_properties(self, properties: dict[str, str]) -> None: ...

    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        """The future gives the entry's position once Kafka acknowledged it."""
        ...

    async def wait_writable(self) -> None:
        """Return once the managed ledger is not fenced after a failed write."""

    async def close(self) -> None: ...


class FenceWatcher(Protocol):
    def fence_lost(self, error: BaseException) -> None:
        """The fence was lost (another holder took it); runs on the loop, never on close."""


class WriteFence(Protocol):
    """A slot's write fence: once taken, every earlier holder's writes fail; what is
    sent through it is written inside its transactions."""

    def send(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, partition: int = -1
    ) -> asyncio.Future[int]: ...

    def confirm(self) -> asyncio.Future[None]: ...

    def watch(self, watcher: FenceWatcher) -> None: ...

    def unwatch(self, watcher: FenceWatcher) -> None: ...

    async def close(self, timeout_seconds: float = 5.0) -> None: ...


class CompactedTopics(Protocol):
    """Companion topics of compacted topics (the latest message of each key)."""

    def new_topic_name(self) -> str: ...

    async def ensure(self, topic: str) -> None: ...

    async def write(self, topic: str, records: list[tuple[bytes, bytes | None]]) -> None: ...

    async def read_all(self, topic: str) -> list[FetchedRecord]: ...


class LedgerDeleter(Protocol):
    """How ledgers are deleted, injected into storage (direct, or two-phase intents).

    ``mark`` is called before the ledgers leave their list and returns the ids that may;
    the list is stored without those; then ``after_metadata`` is called with them."""

    async def mark(self, ledgers: Sequence[LedgerToDelete]) -> set[int]: ...

    async def after_metadata(self, ledgers: Sequence[LedgerToDelete]) -> None: ...


class StorageService(Protocol):
    """A broker's storage as the domain uses it: managed ledgers and metadata tables."""

    @property
    def policies(self) -> MetadataTable: ...

    @property
    def compacted_topics(self) -> CompactedTopics: ...

    async def open_managed_ledger(
        self, name: str, create: bool = True, fence: WriteFence | None = None
    ) -> ManagedLedger: ...

    def managed_ledger_exists(self, name: str) -> bool: ...

    def list_managed_ledgers(self) -> list[str]: ...

    async def delete_managed_ledger(self, name: str) -> None: ...

    async def refresh(self) -> None:
        """Re-read every metadata table to its current end."""

    async def close(self, timeout_seconds: float | None = None) -> None: ...


class LedgerUsage(Protocol):
    """What a broker answers a deletion worker about one of its ledgers."""

    async def ledger_status(
        self, name: str, ledger_id: int, ledger_type: LedgerType = ..., uid: str = ""
    ) -> LedgerStatus:
        """May a deletion worker delete this copy (Kafka: ``LEDGER``, tiered storage:
        ``OFFLOAD_LEDGER`` with its ``uid``) of the ledger?"""
        ...


# --- for processes that are not brokers -----------------------------------------------
class LedgerCatalog(Protocol):
    """One cluster's ledger metadata, read from Kafka when asked (deletion worker, doctor)."""

    async def stored_ledgers(self, managed_ledger_name: str) -> list[LedgerInfo] | None: ...

    async def managed_ledgers(self) -> dict[str, list[LedgerInfo]]: ...

    async def compacted_topics(self) -> tuple[set[str], set[str]]: ...

    async def allocated_for(self, ledger_id: int) -> str | None: ...

    async def ledger_header(self, ledger_id: int) -> LedgerMetadata | None: ...

    async def ledger_exists(self, ledger_id: int) -> bool: ...

    async def delete_ledger(self, ledger_id: int) -> bool: ...

    async def ledger_ids(self) -> list[int]: ...

    async def broker_admin_urls(self) -> list[str]: ...

    async def close(self) -> None: ...


class OffloadStore(Protocol):
    """Tiered storage as a deletion worker and the doctor see it (blocking calls)."""

    def path(self, ledger_id: int, uid: str) -> Path: ...

    def read_header(self, path: Path) -> OffloadedHeader: ...

    def delete(self, ledger_id: int, uid: str) -> bool: ...

    def copies(self) -> list[StoredCopy]: ...
