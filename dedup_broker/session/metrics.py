"""The session layer's Prometheus metrics: connections, attached clients, bad input.

Pulsar's connection counters are named ``..._total_count`` and exposed as gauges;
prometheus_client would rename a counter of that name, so they are gauges here too.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class SessionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.connections_opened = Gauge(
            "pulsar_connection_created_total_count", "Client connections accepted", registry=r
        )
        self.connections_closed = Gauge(
            "pulsar_connection_closed_total_count", "Client connections closed", registry=r
        )
        self._active = Gauge("pulsar_active_connections", "Client connections open now", registry=r)
        self.producers = Gauge("pulsar_producers_count", "Producers connected", registry=r)
        self.consumers = Gauge("pulsar_consumers_count", "Consumers connected", registry=r)
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

    def watch_connections(self, count: Callable[[], int]) -> None:
        self._active.set_function(lambda: float(count()))
