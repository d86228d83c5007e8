"""Deduplication: PIP-6 sequence ids per producer (``sequence``)."""

from dedup_broker.dedup.sequence import (
    DEDUP_CURSOR,
    DedupStatus,
    MessageDeduplication,
    StoredSequence,
    Verdict,
    stored_sequence,
)

__all__ = [
    "DEDUP_CURSOR",
    "DedupStatus",
    "MessageDeduplication",
    "StoredSequence",
    "Verdict",
    "stored_sequence",
]
