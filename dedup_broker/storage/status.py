"""Values the storage layer answers with about ledgers; their strings are wire values.

A managed ledger's state (``ManagedLedger.state``, shown in topic stats) is one of
``OPEN``, ``FENCED`` (recovering from a failed write) or ``CLOSED``.

A deletion worker asks a broker whether it may delete a copy of a ledger (HTTP JSON
``"status": "in-use"``) and names which copy (``LEDGER`` or ``OFFLOAD_LEDGER``, Pulsar's
``LedgerType`` names, also in the deletion intents).
"""

from __future__ import annotations

import enum

OPEN, FENCED, CLOSED = "Open", "Fenced", "Closed"


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
