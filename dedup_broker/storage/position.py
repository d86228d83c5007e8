"""Value types shared by the storage layer and its users: positions, entries, ledger infos."""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def is_open(self) -> bool:
        return self.entries < 0
