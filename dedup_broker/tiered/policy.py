"""The offload thresholds: how many bytes of a topic may stay only in Kafka, and for how
long a closed ledger may; and how long a Kafka copy outlives its offload.

Namespace level (Pulsar's ``offload_threshold`` and ``offload_threshold_in_seconds``),
else the broker's ``managedLedgerOffloadAutoTriggerSizeThresholdBytes`` and
``managedLedgerOffloadThresholdInSeconds``; negative turns that rule off, 0 offloads
every closed ledger. ``offloadDeletionLagMs`` (namespace), else the broker's
``managedLedgerOffloadDeletionLagMs``.
"""

from __future__ import annotations

from collections.abc import Iterable

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.namespace_policies import OFFLOAD_DELETION_LAG_MS
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_policies import BadPolicyError, Level, TopicPolicy
from dedup_broker.storage.api import ManagedLedger

OFFLOAD_THRESHOLD = "offload_threshold"
OFFLOAD_THRESHOLD_IN_SECONDS = "offload_threshold_in_seconds"


def _offload_policies(value: object, level: Level, config: BrokerConfig) -> dict[str, object]:
    if not isinstance(value, dict):
        raise BadPolicyError(f"expected Pulsar's OffloadPolicies as a JSON object, got {value!r}")
    return dict(value)


OFFLOAD_POLICIES = TopicPolicy(
    "offload_policies",
    "offloadPolicies",
    "offloadPolicies",
    _offload_policies,
    lambda config: {
        "managedLedgerOffloadDriver": config.managed_ledger_offload_driver,
        "managedLedgerOffloadThresholdInBytes": (
            config.managed_ledger_offload_auto_trigger_size_threshold_bytes
        ),
        "managedLedgerOffloadThresholdInSeconds": (
            config.managed_ledger_offload_threshold_in_seconds
        ),
        "managedLedgerOffloadDeletionLagInMillis": config.managed_ledger_offload_deletion_lag_ms,
    },
)
"""Pulsar's ``OffloadPolicies`` of a topic or a namespace (``http/topic_policies.py``):
stored and served as given; the thresholds above and the broker's offloader apply."""


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


def offload_deletion_lag_ms(policies: Policies, config: BrokerConfig, name: TopicName) -> int:
    """The namespace's ``offloadDeletionLagMs``, else ``managedLedgerOffloadDeletionLagMs``."""
    value = policies.namespace_value(name.namespace_name, OFFLOAD_DELETION_LAG_MS)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return config.managed_ledger_offload_deletion_lag_ms
