"""Where a topic's PIP-6 settings come from: topic > namespace > broker, as in Pulsar."""

from __future__ import annotations

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies

DEDUP = "deduplicationEnabled"
DEDUP_SNAPSHOT_INTERVAL = "deduplicationSnapshotIntervalSeconds"


def deduplication_enabled(policies: Policies, config: BrokerConfig, topic: TopicName) -> bool:
    """Topic setting, else namespace setting, else ``brokerDeduplicationEnabled``."""
    value = policies.effective(topic, DEDUP)
    return config.broker_deduplication_enabled if value is None else bool(value)


def snapshot_interval_seconds(policies: Policies, config: BrokerConfig, topic: TopicName) -> int:
    """Topic, else namespace, else ``brokerDeduplicationSnapshotIntervalSeconds``."""
    value = policies.effective(topic, DEDUP_SNAPSHOT_INTERVAL)
    if value is None:
        return config.broker_deduplication_snapshot_interval_seconds
    return int(value)
