"""The cluster's metrics: how many ownership slots this broker holds.

A broker that holds no slot serves no topic; alert rules compare it with the number of
brokers and slots (more brokers than slots leaves some idle by design).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric


class SlotHolder(Protocol):
    @property
    def owned(self) -> frozenset[int]: ...


class ClusterMetrics:
    def __init__(self, cluster_name: str, slots: int, holder: SlotHolder) -> None:
        self._cluster_name = cluster_name
        self._slots = slots
        self._holder = holder

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "dedup_broker_owned_slots",
                "Ownership slots this broker holds (0: it serves no topic)",
                labels=["cluster"],
            ),
            GaugeMetricFamily(
                "dedup_broker_ownership_slots",
                "Ownership slots of the cluster (clusterOwnershipSlots)",
                labels=["cluster"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        owned, slots = self._families()
        owned.add_metric([self._cluster_name], len(self._holder.owned))
        slots.add_metric([self._cluster_name], self._slots)
        yield from (owned, slots)
