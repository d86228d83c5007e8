"""The broker domain's Prometheus metrics (names follow Pulsar's ``pulsar_*`` where they
exist): what was published, dispatched and deduplicated."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dedup_broker.domain.non_persistent.metrics import NonPersistentMetrics


class Dispatching(Protocol):
    """A subscription, as the gauges read it."""

    @property
    def msgs_out(self) -> int: ...

    @property
    def bytes_out(self) -> int: ...


class WithSubscriptions(Protocol):
    """A topic, as the gauges read it."""

    @property
    def subscriptions(self) -> Mapping[str, Dispatching]: ...


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

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = r = registry
        self.non_persistent = NonPersistentMetrics(r)
        self.msgs_in = Counter("pulsar_in_messages_total", "Messages published", registry=r)
        self.bytes_in = Counter(
            "pulsar_in_bytes_total", "Bytes published (entry bytes)", registry=r
        )
        self.publish_latency = Histogram(
            "pulsar_broker_publish_latency_seconds",
            "From SEND received to Kafka acknowledgement",
            buckets=PUBLISH_LATENCY_BUCKETS,
            registry=r,
        )
        self.kafka_write_errors = Counter(
            "dedup_broker_kafka_write_errors_total",
            "Entry writes Kafka did not acknowledge",
            registry=r,
        )
        self.dedup_verdicts = Counter(
            "dedup_broker_deduplication_verdicts_total",
            "Deduplication verdicts on SEND but NotDup: Dup, PartlyDup (a batch stored "
            "in part, its new messages written), and Unknown each time a SEND waiting for "
            "its earlier copy asks again",
            ("verdict",),
            registry=r,
        )
        self._topics = Gauge("pulsar_topics_count", "Topics loaded on this broker", registry=r)
        self._out_msgs = Gauge(
            "pulsar_out_messages_total", "Messages dispatched to consumers", registry=r
        )
        self._out_bytes = Gauge(
            "pulsar_out_bytes_total", "Bytes dispatched to consumers", registry=r
        )

    def watch_topics(self, topics: Callable[[], Collection[WithSubscriptions]]) -> None:
        """Gauges over the loaded topics, read when scraped."""
        self._topics.set_function(lambda: float(len(topics())))
        self._out_msgs.set_function(
            lambda: float(sum(s.msgs_out for t in topics() for s in t.subscriptions.values()))
        )
        self._out_bytes.set_function(
            lambda: float(sum(s.bytes_out for t in topics() for s in t.subscriptions.values()))
        )

    def record_publish(self, messages: int, size: int, seconds: float) -> None:
        self.msgs_in.inc(messages)
        self.bytes_in.inc(size)
        self.publish_latency.observe(seconds)
