"""Key-window deduplication's Prometheus metrics."""

from __future__ import annotations

from collections.abc import Callable

from dedup_broker.admin.metrics import Registry

REDIS_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class KeyDedupMetrics:
    def __init__(self, registry: Registry) -> None:
        r = registry
        self.dropped = r.counter(
            "dedup_broker_key_dedup_repeats_dropped_total",
            "Messages dropped as repeats of a key stored within its window",
        )
        self.redis_latency = r.histogram(
            "dedup_broker_key_dedup_redis_latency_seconds",
            "Duration of one Redis round trip of key deduplication",
            buckets=REDIS_LATENCY_BUCKETS,
        )
        self.redis_errors = r.counter(
            "dedup_broker_key_dedup_redis_errors_total", "Redis calls that failed or timed out"
        )
        self._round_trips = r.gauge(
            "dedup_broker_key_dedup_redis_round_trips_total", "Redis round trips so far"
        )
        self._tracked = r.gauge(
            "dedup_broker_key_dedup_keys_tracked",
            "Keys in the window stored by this broker, per scope",
            ("scope",),
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
        self._tracked.remove(scope=scope_id)
