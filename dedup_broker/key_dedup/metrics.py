"""Key-window deduplication's Prometheus metrics, per namespace (``cluster``, ``namespace``).

Hits and misses are the scopes' own counts (``repeatsDropped`` and ``messagesKept`` in
the admin stats), read when scraped; a scope that goes away leaves its counts to its
namespace, so the counters never go back. Redis round trips are timed per namespace of
the scope they serve.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric

from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import BrokerError

REDIS_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)
NAMESPACE_LABELS = ("cluster", "namespace")


class CountedScope(Protocol):
    @property
    def scope_id(self) -> str: ...

    @property
    def dropped(self) -> int: ...

    @property
    def kept(self) -> int: ...


@functools.lru_cache(maxsize=4096)
def scope_labels(scope_id: str) -> tuple[str, str]:
    """``(cluster, namespace)`` of a scope id (``cluster|namespace:t/ns|...`` or
    ``cluster|topic:persistent://t/ns/x|...``, as ``KeyDedupService.scope_id`` makes them)."""
    cluster, _, rest = scope_id.partition("|")
    kind, _, value = rest.partition("|")[0].partition(":")
    if kind == "topic":
        try:
            value = TopicName.parse(value).namespace_name
        except BrokerError:
            value = ""
    return cluster, value


class KeyWindowCounts:
    """Hits and misses per namespace, and Redis round trips, read when scraped."""

    def __init__(self) -> None:
        self.scopes: Callable[[], Iterable[CountedScope]] = lambda: ()
        self.round_trips: Callable[[], int] = lambda: 0
        self.retired: dict[tuple[str, str], list[int]] = {}
        """Counts of scopes gone, by ``(cluster, namespace)``: hits, misses."""

    def retire(self, scope: CountedScope) -> None:
        counts = self.retired.setdefault(scope_labels(scope.scope_id), [0, 0])
        counts[0] += scope.dropped
        counts[1] += scope.kept

    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                "dedup_broker_key_dedup_hits_total",
                "Messages whose key was in the window: dropped as repeats",
                labels=list(NAMESPACE_LABELS),
            ),
            CounterMetricFamily(
                "dedup_broker_key_dedup_misses_total",
                "Messages whose key was not in the window: stored",
                labels=list(NAMESPACE_LABELS),
            ),
            CounterMetricFamily(
                "dedup_broker_key_dedup_redis_round_trips_total", "Redis round trips"
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        counts = {labels: list(values) for labels, values in self.retired.items()}
        for scope in list(self.scopes()):
            total = counts.setdefault(scope_labels(scope.scope_id), [0, 0])
            total[0] += scope.dropped
            total[1] += scope.kept
        hits, misses, round_trips = self._families()
        for labels, (dropped, kept) in sorted(counts.items()):
            hits.add_metric(list(labels), dropped)
            misses.add_metric(list(labels), kept)
        round_trips.add_metric([], self.round_trips())
        yield from (hits, misses, round_trips)


class KeyDedupMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.redis_latency = Histogram(
            "dedup_broker_key_dedup_redis_latency_seconds",
            "Duration of one Redis round trip of key deduplication",
            NAMESPACE_LABELS,
            buckets=REDIS_LATENCY_BUCKETS,
            registry=r,
        )
        self.redis_errors = Counter(
            "dedup_broker_key_dedup_redis_errors_total",
            "Redis calls that failed or timed out",
            NAMESPACE_LABELS,
            registry=r,
        )
        self._tracked = Gauge(
            "dedup_broker_key_dedup_keys_tracked",
            "Keys in the window stored by this broker, per scope",
            ("scope",),
            registry=r,
        )
        self.windows = KeyWindowCounts()
        r.register(self.windows)

    def observe_redis(self, scope_id: str, seconds: float, ok: bool) -> None:
        """One round trip for a scope (its errors series exists from the first call on,
        so that an alert sees its first increase)."""
        labels = scope_labels(scope_id)
        self.redis_latency.labels(*labels).observe(seconds)
        errors = self.redis_errors.labels(*labels)
        if not ok:
            errors.inc()

    def watch(
        self, scopes: Callable[[], Iterable[CountedScope]], round_trips: Callable[[], int]
    ) -> None:
        self.windows.scopes = scopes
        self.windows.round_trips = round_trips

    def track_scope(self, scope_id: str, read: Callable[[], int]) -> None:
        self._tracked.labels(scope=scope_id).set_function(lambda: float(read()))

    def forget_scope(self, scope: CountedScope) -> None:
        self._tracked.remove(scope.scope_id)
        self.windows.retire(scope)
