"""What a topic's managed ledger asks of the namespace policies as it runs."""

from __future__ import annotations

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.retention.policy import topic_retention
from dedup_broker.storage.api import ManagedLedger, Retention
from dedup_broker.tiered.policy import (
    offload_deletion_lag_ms,
    offload_threshold,
    offload_threshold_in_seconds,
)


class LedgerLimits:
    """The namespace policies a topic's managed ledger asks about as it runs (retention,
    offload thresholds and deletion lag): one small object per topic rather than a
    closure per question."""

    __slots__ = ("config", "ledger", "name", "policies")

    def __init__(
        self, policies: Policies, config: BrokerConfig, name: TopicName, ledger: ManagedLedger
    ) -> None:
        self.policies, self.config, self.name, self.ledger = policies, config, name, ledger

    def retention(self) -> Retention:
        return topic_retention(self.policies, self.config, self.name, self.ledger)

    def offload_threshold(self) -> int:
        return offload_threshold(self.policies, self.config, self.name)

    def offload_threshold_seconds(self) -> int:
        return offload_threshold_in_seconds(self.policies, self.config, self.name)

    def offload_deletion_lag_ms(self) -> int:
        return offload_deletion_lag_ms(self.policies, self.config, self.name)
