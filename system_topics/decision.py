"""The one place that decides what the outcome of checking an intent means.

``IntentChecker.evaluate`` says what happened (a :class:`Verdict`); :func:`decide` turns
it into ack, retry or dead-letter. Everything that is not a failure is acknowledged:
forged, stale or foreign intents delete nothing and are not worth retrying.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.Enum):
    MALFORMED = "malformed"
    """Not a ``PendingDeleteLedgerInfo``."""
    NOT_OURS = "not-ours"
    """Names no ledger of this cluster (never allocated here, unknown storage)."""
    IN_USE = "in-use"
    """The owning broker still lists the ledger."""
    MISMATCH = "mismatch"
    """The ledger's own metadata names another owner, component, or it is not a ledger."""
    DELETED = "deleted"
    ALREADY_GONE = "already-gone"
    FAILED = "failed"
    """Could not be decided or done now (broker unreachable, delete failed): try later."""


REJECTED = frozenset({Verdict.MALFORMED, Verdict.NOT_OURS, Verdict.IN_USE, Verdict.MISMATCH})
SUCCEEDED = frozenset({Verdict.DELETED, Verdict.ALREADY_GONE})


class Action(enum.Enum):
    ACK = "ack"
    RETRY = "retry"
    DEAD_LETTER = "dead-letter"


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: Verdict
    detail: str = ""


def decide(verdict: Verdict, reconsume_times: int, max_retries: int) -> Action:
    """Ack everything but failures; a failure is retried until it was reconsumed
    ``max_retries`` times, then dead-lettered."""
    if verdict is not Verdict.FAILED:
        return Action.ACK
    if reconsume_times < max_retries:
        return Action.RETRY
    return Action.DEAD_LETTER
