"""A topic's internal stats (managed ledger, cursors, PIP-6 state) as Pulsar's admin API
answers them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dedup_broker.backlog.quota import estimated_backlog_size
from dedup_broker.domain.topic_rates import in_rates, out_rates
from dedup_broker.domain_base.topic_metadata import created_ms

if TYPE_CHECKING:
    from dedup_broker.domain.subscription import Subscription
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
    """A topic's stats as Pulsar's admin API answers them: rates over the last stats
    period; ``backlogSize`` is the largest backlog size of its durable subscriptions;
    ``topicCreationTimeStamp`` is when the admin API created it, else when this broker
    loaded it (a topic a client's use created)."""
    ledger = topic.managed_ledger
    created = created_ms(topic.services.policies, topic.name)
    subscriptions = topic.subscriptions.values()
    durable = [s for s in subscriptions if s.durable]
    sent = out_rates(c for s in subscriptions for c in s.consumers)
    return {
        **in_rates(topic.producers.values()),
        "msgRateOut": sent["msgRateOut"],
        "msgThroughputOut": sent["msgThroughputOut"],
        "msgInCounter": topic.msgs_in,
        "bytesInCounter": topic.bytes_in,
        "msgOutCounter": sum(s.msgs_out for s in subscriptions),
        "bytesOutCounter": sum(s.bytes_out for s in subscriptions),
        "storageSize": ledger.total_size,
        "backlogSize": max((estimated_backlog_size(ledger, s.cursor) for s in durable), default=0),
        "offloadedStorageSize": sum(info.size for info in ledger.ledgers() if info.offloaded),
        "topicCreationTimeStamp": created if created is not None else topic.loaded_ms,
        "lastPublishTimeStamp": topic.last_publish_ms,
        "deduplicationStatus": topic.dedup.status.value,
        "keyDeduplication": (
            topic.made_key_dedup.stats() if topic.made_key_dedup is not None else {"enabled": False}
        ),
        "publishers": [p.stats() for p in topic.producers.values()],
        "waitingPublishers": len(topic.access.waiting),
        "topicEpoch": topic.access.epoch,
        "subscriptions": {n: subscription_stats(topic, s) for n, s in topic.subscriptions.items()},
        "replication": {},
        "compaction": topic.compaction.stats(),
    }


def subscription_stats(topic: Topic, subscription: Subscription) -> dict[str, object]:
    """Pulsar's ``SubscriptionStats``, with its consumers' rates; ``backlogSize`` is
    Pulsar's estimate, the unacknowledged entries times the average entry size (what the
    backlog quota measures too)."""
    return {
        **subscription.stats(),
        **out_rates(subscription.consumers),
        "backlogSize": estimated_backlog_size(topic.managed_ledger, subscription.cursor),
        "consumersAfterMarkDeletePosition": {},
    }
