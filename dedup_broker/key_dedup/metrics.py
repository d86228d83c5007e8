"""Key-window deduplication's Prometheus metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REDIS_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class KeyDedupMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.dropped = Counter(
            "dedup_broker_key_dedup_repeats_dropped_total",
            "Messages dropped as repeats of a key stored within its window",
            registry=r,
        )
        self.redis_latency = Histogram(
            "dedup_broker_key_dedup_redis_latency_seconds",
            "Duration of one Redis round trip of key deduplication",
            buckets=REDIS_LATENCY_BUCKETS,
            registry=r,
        )
        self.redis_errors = Counter(
            "dedup_broker_key_dedup_redis_errors_total",
            "Redis calls that failed or timed out",
            registry=r,
        )
        self._round_trips = Gauge(
            "dedup_broker_key_dedup_redis_round_trips_total", "Redis round trips so far", registry=r
        )
        self._tracked = Gauge(
            "dedup_broker_key_dedup_keys_tracked",
            "Keys in the window stored by this broker, per scope",
            ("scope",),
            registry=r,
        )

    def observe_redis(self, seconds: float, ok: bool) -> None:
        self.redis_latency.observe(seconds)
        if not ok:
            self.redis_errors.inc()

    def count_round_trips(self, read: Callable[[], int]) -> None:
        self._round_trips.set_function(lambda: float(read()))

    def track_scope(self, scope_id: str, read: Callable[[], int]) -> None:
        self._tracked.labels(scope=scope_id).set_function(lambda: float(read()))

    def forget_scope(self, scope_id: str) -> None:
        self._tracked.remove(scope_id)
