"""The deletion system topics of one cluster and the worker group that consumes them."""

from __future__ import annotations

from dataclasses import dataclass

from dedup_broker.config import BrokerConfig

RECONSUME_TIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
"""Record headers of RETRY and DLQ copies (Pulsar's retry-letter property names)."""


@dataclass(frozen=True, slots=True)
class DeletionTopics:
    main: str
    retry: str
    dead_letter: str
    partitions: int
    group: str

    @classmethod
    def from_config(cls, config: BrokerConfig) -> DeletionTopics:
        return cls(
            main=config.two_phase_deletion_topic,
            retry=config.two_phase_deletion_retry_topic,
            dead_letter=config.two_phase_deletion_dead_letter_topic,
            partitions=config.two_phase_deletion_ledger_deletion_parallelism,
            group=f"{config.cluster_name}.ledger-deletion-worker",
        )

    def topic_configs(self) -> dict[str, tuple[int, dict[str, str]]]:
        """Name -> (partitions, settings). Intents never expire before they are worked."""
        keep = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
        return {
            self.main: (self.partitions, keep),
            self.retry: (self.partitions, keep),
            self.dead_letter: (1, keep),
        }
