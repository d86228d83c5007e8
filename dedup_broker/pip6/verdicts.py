"""What deduplication answers for a SEND, and the states a topic's deduplication is in."""

from __future__ import annotations

from enum import Enum


class Verdict(Enum):
    """What the publish path does with one SEND."""

    NOT_DUP = "NotDup"
    """New: write it."""
    DUP = "Dup"
    """Already durably stored: write nothing, answer a receipt with message id -1:-1."""
    PARTLY_DUP = "PartlyDup"
    """Some of the SEND's messages are stored already, some are not (a producer resending
    from a checkpoint): write only the new ones, answer one receipt."""
    UNKNOWN = "Unknown"
    """May or may not end up stored (in flight, or a write failed): write nothing and
    answer SEND_ERROR, so the client reconnects, learns the last persisted sequence id
    and resends what is missing."""


class DedupStatus(Enum):
    """Lifecycle of a topic's deduplication state (values as Pulsar's admin shows them)."""

    DISABLED = "Disabled"
    RECOVERING = "Recovering"
    ENABLED = "Enabled"
    REMOVING = "Removing"
    FAILED = "Failed"
