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


def stats(topic: Topic) -> dict[str, object]:
    """A topic's stats as Pulsar's admin API answers them."""
    return {
        "msgInCounter": topic.msgs_in,
        "bytesInCounter": topic.bytes_in,
        "msgOutCounter": sum(s.msgs_out for s in topic.subscriptions.values()),
        "bytesOutCounter": sum(s.bytes_out for s in topic.subscriptions.values()),
        "averageMsgSize": topic.bytes_in / topic.msgs_in if topic.msgs_in else 0.0,
        "storageSize": topic.managed_ledger.total_size,
        "deduplicationStatus": topic.dedup.status.value,
        "keyDeduplication": (
            topic.made_key_dedup.stats() if topic.made_key_dedup is not None else {"enabled": False}
        ),
        "publishers": [p.stats() for p in topic.producers.values()],
        "waitingPublishers": len(topic.access.waiting),
        "topicEpoch": topic.access.epoch,
        "subscriptions": {n: s.stats() for n, s in topic.subscriptions.items()},
        "replication": {},
        "compaction": topic.compaction.stats(),
    }
