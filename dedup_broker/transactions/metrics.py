"""The coordinators' metrics under Pulsar's names (``pulsar_txn_*``, one series per
coordinator this broker serves), read from the coordinators when scraped."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dedup_broker.transactions.coordinator import TransactionCoordinator

_COUNTERS = (
    ("pulsar_txn_created", "Transactions opened", "created"),
    ("pulsar_txn_committed", "Transactions committed", "committed"),
    ("pulsar_txn_aborted", "Transactions aborted", "aborted"),
    ("pulsar_txn_timeout", "Transactions aborted because their timeout passed", "timed_out"),
    ("pulsar_txn_append_log", "Records written to the coordinator's log", "appended"),
)


class CoordinatorMetrics(Collector):
    def __init__(self, served: Callable[[], Mapping[int, TransactionCoordinator]]) -> None:
        self._served = served

    def describe(self) -> Iterator[Metric]:
        """The families without samples (what the metrics reference lists)."""
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        return self._families(self._served())

    def _families(self, served: Mapping[int, TransactionCoordinator]) -> Iterator[Metric]:
        active = GaugeMetricFamily(
            "pulsar_txn_active_count", "Transactions open or ending", labels=["coordinator_id"]
        )
        for coordinator_id, coordinator in served.items():
            active.add_metric([str(coordinator_id)], len(coordinator.live()))
        yield active
        for name, documentation, field in _COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=["coordinator_id"])
            for coordinator_id, coordinator in served.items():
                family.add_metric([str(coordinator_id)], getattr(coordinator.counts, field))
            yield family
