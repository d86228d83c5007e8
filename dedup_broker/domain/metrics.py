"""The broker's Prometheus metrics (names follow Pulsar's ``pulsar_*`` where they exist)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dedup_broker.admin.metrics import Registry, new_registry

if TYPE_CHECKING:
    from dedup_broker.domain.broker import BrokerService

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

    def __init__(self, broker: BrokerService, registry: Registry | None = None) -> None:
        self.registry = registry or new_registry()
        r = self.registry
        self.connections_opened = r.counter(
            "pulsar_connection_created_total_count", "Client connections accepted"
        )
        self.connections_closed = r.counter(
            "pulsar_connection_closed_total_count", "Client connections closed"
        )
        active = r.gauge("pulsar_active_connections", "Client connections open now")
        active.set_function(lambda: float(len(broker.connections)))
        topics = r.gauge("pulsar_topics_count", "Topics loaded on this broker")
        topics.set_function(lambda: float(len(broker.topics)))
        self.producers = r.gauge("pulsar_producers_count", "Producers connected")
        self.consumers = r.gauge("pulsar_consumers_count", "Consumers connected")
        self.msgs_in = r.counter("pulsar_in_messages_total", "Messages published")
        self.bytes_in = r.counter("pulsar_in_bytes_total", "Bytes published (entry bytes)")
        out_msgs = r.gauge("pulsar_out_messages_total", "Messages dispatched to consumers")
        out_msgs.set_function(
            lambda: float(
                sum(s.msgs_out for t in broker.topics.values() for s in t.subscriptions.values())
            )
        )
        out_bytes = r.gauge("pulsar_out_bytes_total", "Bytes dispatched to consumers")
        out_bytes.set_function(
            lambda: float(
                sum(s.bytes_out for t in broker.topics.values() for s in t.subscriptions.values())
            )
        )
        self.publish_latency = r.histogram(
            "pulsar_broker_publish_latency_seconds",
            "From SEND received to Kafka acknowledgement",
            buckets=PUBLISH_LATENCY_BUCKETS,
        )
        self.kafka_write_errors = r.counter(
            "dedup_broker_kafka_write_errors_total", "Entry writes Kafka did not acknowledge"
        )
        self.checksum_errors = r.counter(
            "dedup_broker_checksum_errors_total", "SEND frames whose CRC32C did not match"
        )
        self.protocol_errors = r.counter(
            "dedup_broker_protocol_errors_total", "Connections closed for unparseable input"
        )
        self.dedup_verdicts = r.counter(
            "dedup_broker_deduplication_verdicts_total",
            "Deduplication verdicts on SEND (NotDup, Dup, Unknown)",
            ("verdict",),
        )

    def record_publish(self, messages: int, size: int, seconds: float) -> None:
        self.msgs_in.inc(messages)
        self.bytes_in.inc(size)
        self.publish_latency.observe(seconds)

    def render(self) -> str:
        return self.registry.render()
