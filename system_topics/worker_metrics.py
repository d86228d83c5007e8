"""The deletion worker's Prometheus metrics and its own ``/metrics`` HTTP endpoint.

The counters live in the worker's own ``prometheus_client`` registry (thread-safe: the
HTTP server reads it from its own thread while the worker counts).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app

from dedup_broker.kafka_logging import KafkaClientErrors
from dedup_broker.metrics_registry import new_registry
from system_topics.decision import REJECTED, SUCCEEDED, Action, Verdict
from system_topics.intents import CopyKind

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

PREFIX = "dedup_broker_ledger_deletion_"


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else new_registry()
        r = self.registry
        self.received = Counter(
            PREFIX + "intents_received_total", "Intents read (main, RETRY)", registry=r
        )
        self.deleted = Counter(
            PREFIX + "ledgers_deleted_total",
            "Ledger copies deleted (or found already gone), by ledger type",
            ("type",),
            registry=r,
        )
        self.rejected = Counter(
            PREFIX + "intents_rejected_total",
            "Intents acknowledged without deleting anything, by reason",
            ("reason",),
            registry=r,
        )
        self.failed = Counter(
            PREFIX + "failed_total", "Attempts that failed (retried or DLQ)", registry=r
        )
        self.retried = Counter(PREFIX + "intents_retried_total", "Copies sent to RETRY", registry=r)
        self.acknowledged = Counter(
            PREFIX + "intents_acknowledged_total", "Intents committed (done with)", registry=r
        )
        self.max_retries = Counter(
            PREFIX + "max_retries_reached_total",
            "Intents sent to the DLQ after the last retry",
            registry=r,
        )
        self.lag = Gauge(
            PREFIX + "lag",
            "Records of the main and RETRY topics the worker group has not committed",
            ("topic",),
            registry=r,
        )
        r.register(KafkaClientErrors())

    def record(self, verdict: Verdict, action: Action, kind: CopyKind = CopyKind.LEDGER) -> None:
        if verdict in SUCCEEDED:
            self.deleted.labels(type=kind.value).inc()
        elif verdict in REJECTED:
            self.rejected.labels(reason=verdict.value).inc()
        else:
            self.failed.inc()
        if action is Action.RETRY:
            self.retried.inc()
        elif action is Action.DEAD_LETTER:
            self.max_retries.inc()


class MetricsServer(ThreadingMixIn, WSGIServer):
    """One thread per scrape; daemon threads, so a stuck scraper never blocks exit."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def serve_metrics(metrics: WorkerMetrics, host: str, port: int) -> MetricsServer:
    """Start ``GET /metrics`` (prometheus_client's exposition) and ``GET /health`` in a
    daemon thread; ``server_port`` is the bound port, ``shutdown()`` stops it."""
    metrics_app = make_wsgi_app(metrics.registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            exposed: Iterable[bytes] = metrics_app(environ, start_response)
            return exposed
        if path == "/health":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    server = make_server(host, port, app, MetricsServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    return server
