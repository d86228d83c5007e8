"""The session layer's Prometheus metrics: connections, attached clients, bad input."""

from __future__ import annotations

from collections.abc import Callable

from dedup_broker.admin.metrics import Registry


class SessionMetrics:
    def __init__(self, registry: Registry) -> None:
        r = registry
        self.registry = registry
        self.connections_opened = r.counter(
            "pulsar_connection_created_total_count", "Client connections accepted"
        )
        self.connections_closed = r.counter(
            "pulsar_connection_closed_total_count", "Client connections closed"
        )
        self._active = r.gauge("pulsar_active_connections", "Client connections open now")
        self.producers = r.gauge("pulsar_producers_count", "Producers connected")
        self.consumers = r.gauge("pulsar_consumers_count", "Consumers connected")
        self.checksum_errors = r.counter(
            "dedup_broker_checksum_errors_total", "SEND frames whose CRC32C did not match"
        )
        self.protocol_errors = r.counter(
            "dedup_broker_protocol_errors_total", "Connections closed for unparseable input"
        )

    def watch_connections(self, count: Callable[[], int]) -> None:
        self._active.set_function(lambda: float(count()))
