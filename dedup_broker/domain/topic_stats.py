"""A topic's internal stats (managed ledger, cursors, PIP-6 state) as Pulsar's admin API
answers them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dedup_broker.domain.topic import Topic


def internal_stats(topic: Topic) -> dict[str, object]:
    ledger = topic.managed_ledger
    cursors: dict[str, object] = {}
    for name, cursor in ledger.cursors.opened().items():
        cursors[name] = {
            "markDeletePosition": str(cursor.mark_delete_position),
            "readPosition": str(cursor.read_position),
            "persistedMarkDeletePosition": str(cursor.persisted_mark_delete_position),
            "individuallyDeletedMessages": [
                f"[{a}..{b}]" for a, b in cursor.individually_deleted_ranges()
            ],
            "properties": dict(cursor.properties),
            "messagesConsumedCounter": ledger.number_of_entries() - cursor.backlog(),
            "numberOfEntriesSinceFirstNotAckedMessage": cursor.backlog(),
        }
    return {
        "entriesAddedCounter": ledger.entries_added,
        "numberOfEntries": ledger.number_of_entries(),
        "totalSize": ledger.total_size,
        "state": ledger.state,
        "lastConfirmedEntry": str(ledger.last_confirmed),
        "ledgers": [
            {
                "ledgerId": info.ledger_id,
                "entries": info.entries,
                "size": info.size,
                "timestamp": info.timestamp_ms,
                "offloaded": info.offloaded,
            }
            for info in ledger.ledgers()
        ],
        "cursors": cursors,
        "deduplication": topic.dedup.stats(),
    }
