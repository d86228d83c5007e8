"""Value types shared by the storage layer and its users: positions, entries, ledger infos."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


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
