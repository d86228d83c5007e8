"""The ``offloadThreshold`` policy: how many bytes of a topic may stay only in Kafka.

Namespace level (Pulsar's ``offload_threshold``), else the broker's
``managedLedgerOffloadAutoTriggerSizeThresholdBytes``; negative turns automatic
offloading off, 0 offloads every closed ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dedup_broker.domain.broker import BrokerService
    from dedup_broker.domain.names import TopicName

OFFLOAD_THRESHOLD = "offload_threshold"


def offload_threshold(broker: BrokerService, name: TopicName) -> int:
    value = broker.policies.namespace_value(name.namespace_name, OFFLOAD_THRESHOLD)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return broker.config.managed_ledger_offload_auto_trigger_size_threshold_bytes
