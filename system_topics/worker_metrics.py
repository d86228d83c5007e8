"""The deletion worker's Prometheus metrics and its own ``/metrics`` HTTP endpoint.

The counters live in the worker's own ``prometheus_client`` registry (thread-safe: the
HTTP server reads it from its own thread while the worker counts).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, Counter, generate_latest

from system_topics.decision import REJECTED, SUCCEEDED, Action, Verdict
from system_topics.intents import CopyKind

PREFIX = "dedup_broker_ledger_deletion_"


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
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

    def render(self) -> bytes:
        return generate_latest(self.registry)


def serve_metrics(metrics: WorkerMetrics, host: str, port: int) -> ThreadingHTTPServer:
    """Start ``GET /metrics`` and ``GET /health`` in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, kind = metrics.render(), CONTENT_TYPE_PLAIN_0_0_4
            elif self.path == "/health":
                body, kind = b"ok", "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    return server
