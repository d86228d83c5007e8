"""The session layer's Prometheus metrics: connections and bad input.

Pulsar names its connection counters ``pulsar_connection_created_total_count`` and types
them gauges; here they are counters, ``pulsar_connection_created_total`` and
``pulsar_connection_closed_total``, so that ``rate()`` reads them right. Producers and
consumers are counted per topic from the topics themselves (``domain.topic_metrics``).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class SessionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.connections_opened = Counter(
            "pulsar_connection_created_total", "Client connections accepted", registry=r
        )
        self.connections_closed = Counter(
            "pulsar_connection_closed_total", "Client connections closed", registry=r
        )
        self._active = Gauge("pulsar_active_connections", "Client connections open now", registry=r)
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
