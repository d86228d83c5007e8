"""The ``offloadThreshold`` policy: how many bytes of a topic may stay only in Kafka.

Namespace level (Pulsar's ``offload_threshold``), else the broker's
``managedLedgerOffloadAutoTriggerSizeThresholdBytes``; negative turns automatic
offloading off, 0 offloads every closed ledger.
"""

from __future__ import annotations

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.names import TopicName
from dedup_broker.domain.policies import Policies

OFFLOAD_THRESHOLD = "offload_threshold"


def offload_threshold(policies: Policies, config: BrokerConfig, name: TopicName) -> int:
    value = policies.namespace_value(name.namespace_name, OFFLOAD_THRESHOLD)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return config.managed_ledger_offload_auto_trigger_size_threshold_bytes
