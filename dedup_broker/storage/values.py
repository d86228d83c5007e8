"""Value types of the storage layer: positions, entries, ledger infos, ledger states.

Everything here is a plain value (no I/O); ``api.py`` re-exports it for the rest of the
broker. The strings of ``LedgerState``, ``LedgerStatus`` and ``LedgerType`` are wire
values: topic stats show a managed ledger's state, a deletion worker reads a broker's
``"status": "in-use"`` answer, and deletion intents name ``LEDGER`` or ``OFFLOAD_LEDGER``
(Pulsar's ``LedgerType`` names).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dedup_broker.errors import PermanentError

MB = 1024 * 1024

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
"""Bytes a read returns at most (at least one entry, however large)."""

CURSOR_KEY_SEPARATOR = "\x00"
"""Joins a managed ledger's name and a cursor's name in the cursor table's keys."""

FILESYSTEM_OFFLOAD_DRIVER = "filesystem"
"""The one tiered-storage driver (``managedLedgerOffloadDriver``)."""
OFFLOAD_TEMP_SUFFIX = ".tmp"
"""An offloaded copy being written carries it until it is complete."""


def is_valid_managed_ledger_name(name: str) -> bool:
    """A managed ledger's name is not empty and cannot hold the cursor key separator."""
    return bool(name) and CURSOR_KEY_SEPARATOR not in name


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where an entry lives: ``(ledger_id, entry_id)``, ordered as in Pulsar.

    ``entry_id == -1`` names the spot just before a ledger's first entry; it is how a
    cursor says "nothing acknowledged yet".
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """``str``'s inverse: ``ledger:entry``."""
        ledger, _, entry = text.partition(":")
        return cls(int(ledger), int(entry))


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored entry: opaque bytes plus the timestamp given when it was appended."""

    position: Position
    data: bytes
    timestamp_ms: int


EntryVisitor = Callable[[int, int, list[bytes]], None]
"""``(ledger_id, first entry id, data of consecutive entries)``, called by a scan in a
worker thread: a replay folds entries without an ``Entry`` object per entry."""


@dataclass(frozen=True, slots=True)
class OffloadInfo:
    """A ledger's copy in tiered storage (Pulsar's ``OffloadContext``)."""

    uid: str
    """Names one offload attempt (a UUID); the copy's own header repeats it."""
    complete: bool = False
    """The copy is stored and readable."""
    kafka_deleted: bool = False
    """Deleting the Kafka copy was recorded (its intent acknowledged): read the copy only."""
    timestamp_ms: int = 0
    """When the offload completed."""
    driver: str = ""
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """One ledger of a managed ledger, as recorded in its ``ManagedLedgerInfo``."""

    ledger_id: int
    entries: int
    """Number of entries; -1 while the ledger is the open (current) one."""
    size: int
    """Bytes of entry data (for the open ledger: the acknowledged entries so far)."""
    timestamp_ms: int
    """When the ledger was closed; 0 while it is open."""
    offload: OffloadInfo | None = None
    """Set once an offload of this (closed) ledger started."""

    @property
    def is_open(self) -> bool:
        return self.entries < 0

    @property
    def offloaded(self) -> bool:
        """A complete copy is in tiered storage (reads go there)."""
        return self.offload is not None and self.offload.complete

    @property
    def in_kafka(self) -> bool:
        """The Kafka copy exists (its deletion was not recorded)."""
        return self.offload is None or not self.offload.kafka_deleted


@dataclass(frozen=True, slots=True)
class FetchedRecord:
    """One Kafka record as read back: offset, key, value (None: a tombstone), headers."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...]


class LedgerState(enum.StrEnum):
    """A managed ledger's state (``ManagedLedger.state``, shown in topic stats)."""

    OPEN = "Open"
    FENCED = "Fenced"
    """Recovering from a failed write: appends fail until it knows what Kafka holds."""
    CLOSED = "Closed"


@dataclass(frozen=True, slots=True)
class LedgerToDelete:
    """One ledger whose copies are to be deleted (see ``api.LedgerDeleter``)."""

    managed_ledger_name: str
    ledger_id: int
    component: str = "MANAGED_LEDGER"
    cursor_name: str = ""
    kafka: bool = True
    """Delete the Kafka copy (a LEDGER intent)."""
    offload: OffloadInfo | None = None
    """Delete this tiered-storage copy too (an OFFLOAD_LEDGER intent)."""


@dataclass(frozen=True, slots=True)
class Retention:
    """Pulsar's retention policy: -1 is unlimited in that dimension, 0 keeps nothing.

    A consumed ledger is deleted once either active limit is exceeded (time since it was
    closed, or the size of what would remain); both -1 keeps everything.
    """

    time_minutes: int = 0
    size_mb: int = 0

    @property
    def infinite(self) -> bool:
        return self.time_minutes < 0 and self.size_mb < 0


class LedgerStatus(enum.StrEnum):
    """May a deletion worker delete a copy of a ledger?"""

    IN_USE = "in-use"
    """A managed ledger lists it (in memory or in what is stored)."""
    PENDING = "pending"
    """Leaving its list, the change not stored yet: ask again shortly."""
    DELETABLE = "deletable"
    """Nothing lists it any more."""


class LedgerType(enum.StrEnum):
    """Which copy of a ledger: its Kafka topic or its offloaded (tiered-storage) copy."""

    LEDGER = "LEDGER"
    OFFLOAD_LEDGER = "OFFLOAD_LEDGER"


COMPACTED_TOPIC_PROPERTY = "pulsar.compaction.topic"
"""Managed-ledger property naming the companion topic of a compacted topic."""

SYSTEM_CURSOR_PREFIX = "pulsar."
"""The broker's own cursors (``pulsar.dedup``)."""

COMPACTION_CURSOR = "__compaction"
"""Pulsar's name for the compaction subscription; its mark-delete is the horizon."""


def is_system_cursor(name: str) -> bool:
    return name.startswith(SYSTEM_CURSOR_PREFIX) or name == COMPACTION_CURSOR


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """What the header record of a ledger topic says about the ledger."""

    ledger_id: int
    managed_ledger_name: str
    component: str  # "MANAGED_LEDGER", "MANAGED_CURSOR" or "SCHEMA_STORAGE"
    cursor_name: str
    created_ms: int
    created_by: str


@dataclass(frozen=True, slots=True)
class OffloadedHeader:
    """What an offloaded copy says about itself (its first record)."""

    ledger_id: int
    managed_ledger_name: str
    component: str
    cursor_name: str
    uid: str
    entries: int
    size: int
    offloaded_ms: int
    offloaded_by: str
    cluster_name: str


@dataclass(frozen=True, slots=True)
class StoredCopy:
    """A file in the offload directory: one attempt's copy of a ledger."""

    ledger_id: int
    uid: str
    path: Path
    temporary: bool


class LedgerHeaderError(PermanentError):
    """Offset 0 of a ledger topic is not a readable ledger header: the topic is not a
    ledger (or not one of this broker's), however it came to be named like one."""


class ReadLimited(Protocol):
    @property
    def last_confirmed(self) -> Position: ...

    @property
    def read_limit(self) -> Position | None: ...


def readable_end(ledger: ReadLimited) -> Position:
    """The last entry readers see: ``last_confirmed``, or the ledger's read limit (the
    owner's max read position) when that is lower."""
    last, limit = ledger.last_confirmed, ledger.read_limit
    return last if limit is None or limit >= last else limit
