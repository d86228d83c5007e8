"""Prometheus metrics of non-persistent topics: what was published, delivered and dropped."""

from __future__ import annotations

from collections.abc import Callable, Collection
from enum import Enum

from prometheus_client import CollectorRegistry, Counter, Gauge


class DropReason(Enum):
    """Why a message of a non-persistent topic reached no consumer of a subscription."""

    NO_SUBSCRIPTION = "no_subscription"
    """Published while the topic had no subscription (so no consumer) at all."""
    NO_PERMITS = "no_permits"
    """A subscription's consumers had no permits left, or their connections were full."""


class NonPersistentMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.msgs_in = Counter(
            "dedup_broker_non_persistent_in_messages_total",
            "Messages published on non-persistent topics",
            registry=r,
        )
        self.msgs_out = Counter(
            "dedup_broker_non_persistent_out_messages_total",
            "Messages of non-persistent topics delivered to consumers",
            registry=r,
        )
        self.msgs_dropped = Counter(
            "dedup_broker_non_persistent_dropped_messages_total",
            "Messages of non-persistent topics a subscription dropped (or, with no "
            "subscription, the topic)",
            ("reason",),
            registry=r,
        )
        self._topics = Gauge(
            "dedup_broker_non_persistent_topics",
            "Non-persistent topics live on this broker",
            registry=r,
        )

    def watch_topics(self, topics: Callable[[], Collection[object]]) -> None:
        self._topics.set_function(lambda: float(len(topics())))

    def dropped(self, reason: DropReason, messages: int) -> None:
        self.msgs_dropped.labels(reason=reason.value).inc(messages)
