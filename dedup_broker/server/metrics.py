"""The broker's Prometheus metrics (names follow Pulsar's ``pulsar_*`` where they exist).

prometheus_client names a counter ``<name>_total``; Pulsar's connection counters are named
``..._total_count``, so they are gauges (as in Pulsar), which keep their names as given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dedup_broker.metrics_registry import exposition, new_registry

if TYPE_CHECKING:
    from dedup_broker.server.broker import BrokerService

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
    """Counters updated on the hot paths; gauges read from the broker at scrape time."""

    def __init__(self, broker: BrokerService, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or new_registry()
        r = self.registry
        self.connections_opened = Gauge(
            "pulsar_connection_created_total_count", "Client connections accepted", registry=r
        )
        self.connections_closed = Gauge(
            "pulsar_connection_closed_total_count", "Client connections closed", registry=r
        )
        active = Gauge("pulsar_active_connections", "Client connections open now", registry=r)
        active.set_function(lambda: float(len(broker.connections)))
        topics = Gauge("pulsar_topics_count", "Topics loaded on this broker", registry=r)
        topics.set_function(lambda: float(len(broker.topics)))
        self.producers = Gauge("pulsar_producers_count", "Producers connected", registry=r)
        self.consumers = Gauge("pulsar_consumers_count", "Consumers connected", registry=r)
        self.msgs_in = Counter("pulsar_in_messages_total", "Messages published", registry=r)
        self.bytes_in = Counter(
            "pulsar_in_bytes_total", "Bytes published (entry bytes)", registry=r
        )
        out_msgs = Gauge(
            "pulsar_out_messages_total", "Messages dispatched to consumers", registry=r
        )
        out_msgs.set_function(
            lambda: float(
                sum(s.msgs_out for t in broker.topics.values() for s in t.subscriptions.values())
            )
        )
        out_bytes = Gauge("pulsar_out_bytes_total", "Bytes dispatched to consumers", registry=r)
        out_bytes.set_function(
            lambda: float(
                sum(s.bytes_out for t in broker.topics.values() for s in t.subscriptions.values())
            )
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
        self.checksum_errors = Counter(
            "dedup_broker_checksum_errors_total",
            "SEND frames whose CRC32C did not match",
            registry=r,
        )
        self.protocol_errors = Counter(
            "dedup_broker_protocol_errors_total",
            "Connections closed for unparseable input",
            registry=r,
        )
        self.dedup_verdicts = Counter(
            "dedup_broker_deduplication_verdicts_total",
            "Deduplication verdicts on SEND (NotDup, Dup, Unknown)",
            ("verdict",),
            registry=r,
        )

    def record_publish(self, messages: int, size: int, seconds: float) -> None:
        self.msgs_in.inc(messages)
        self.bytes_in.inc(size)
        self.publish_latency.observe(seconds)

    def render(self) -> bytes:
        """The ``/metrics`` exposition of this broker's registry."""
        return exposition(self.registry)
