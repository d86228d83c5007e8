"""The broker domain's Prometheus metrics (names follow Pulsar's ``pulsar_*`` where they
exist): what was published, dispatched and deduplicated."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from dedup_broker.admin.metrics import Registry

if TYPE_CHECKING:
    from dedup_broker.domain.topic import Topic

PUBLISH_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)


class BrokerMetrics:
    """Counters updated on the hot paths; gauges read from the topics at scrape time."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        r = registry
        self.msgs_in = r.counter("pulsar_in_messages_total", "Messages published")
        self.bytes_in = r.counter("pulsar_in_bytes_total", "Bytes published (entry bytes)")
        self.publish_latency = r.histogram(
            "pulsar_broker_publish_latency_seconds",
            "From SEND received to Kafka acknowledgement",
            buckets=PUBLISH_LATENCY_BUCKETS,
        )
        self.kafka_write_errors = r.counter(
            "dedup_broker_kafka_write_errors_total", "Entry writes Kafka did not acknowledge"
        )
        self.dedup_verdicts = r.counter(
            "dedup_broker_deduplication_verdicts_total",
            "Deduplication verdicts on SEND (NotDup, Dup, Unknown)",
            ("verdict",),
        )

    def watch_topics(self, topics: Callable[[], Collection[Topic]]) -> None:
        """Gauges over the loaded topics, read when scraped."""
        r = self.registry
        r.gauge("pulsar_topics_count", "Topics loaded on this broker").set_function(
            lambda: float(len(topics()))
        )
        r.gauge("pulsar_out_messages_total", "Messages dispatched to consumers").set_function(
            lambda: float(sum(s.msgs_out for t in topics() for s in t.subscriptions.values()))
        )
        r.gauge("pulsar_out_bytes_total", "Bytes dispatched to consumers").set_function(
            lambda: float(sum(s.bytes_out for t in topics() for s in t.subscriptions.values()))
        )

    def record_publish(self, messages: int, size: int, seconds: float) -> None:
        self.msgs_in.inc(messages)
        self.bytes_in.inc(size)
        self.publish_latency.observe(seconds)
