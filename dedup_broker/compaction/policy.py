"""The ``compactionThreshold`` policy: uncompacted bytes that start a compaction.

Namespace level (Pulsar's ``compaction_threshold``), else the broker's
``brokerServiceCompactionThresholdInBytes``; 0 (the default) turns automatic compaction
off, as in Pulsar.
"""

from __future__ import annotations

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies

COMPACTION_THRESHOLD = "compaction_threshold"


def compaction_threshold(policies: Policies, config: BrokerConfig, name: TopicName) -> int:
    value = policies.namespace_value(name.namespace_name, COMPACTION_THRESHOLD)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return config.broker_service_compaction_threshold_in_bytes
