"""The offload thresholds: how many bytes of a topic may stay only in Kafka, and for how
long a closed ledger may.

Namespace level (Pulsar's ``offload_threshold`` and ``offload_threshold_in_seconds``),
else the broker's ``managedLedgerOffloadAutoTriggerSizeThresholdBytes`` and
``managedLedgerOffloadThresholdInSeconds``; negative turns that rule off, 0 offloads
every closed ledger.
"""

from __future__ import annotations

from collections.abc import Iterable

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.storage.api import ManagedLedger

OFFLOAD_THRESHOLD = "offload_threshold"
OFFLOAD_THRESHOLD_IN_SECONDS = "offload_threshold_in_seconds"


def check_namespace_offloads(
    loaded: Iterable[tuple[TopicName, ManagedLedger]], namespace: str
) -> None:
    """The namespace's thresholds changed: its loaded topics look again."""
    for name, ledger in loaded:
        if name.namespace_name == namespace:
            ledger.offloads.check_soon()


def offload_threshold(policies: Policies, config: BrokerConfig, name: TopicName) -> int:
    value = policies.namespace_value(name.namespace_name, OFFLOAD_THRESHOLD)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return config.managed_ledger_offload_auto_trigger_size_threshold_bytes


def offload_threshold_in_seconds(policies: Policies, config: BrokerConfig, name: TopicName) -> int:
    value = policies.namespace_value(name.namespace_name, OFFLOAD_THRESHOLD_IN_SECONDS)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return config.managed_ledger_offload_threshold_in_seconds
