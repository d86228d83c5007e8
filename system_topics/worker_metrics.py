"""The deletion worker's Prometheus metrics and its own ``/metrics`` HTTP endpoint.

The worker loop is one thread and the HTTP server another; a lock keeps a scrape from
reading while an outcome is being recorded.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dedup_broker.admin.metrics import CONTENT_TYPE, Registry, new_registry
from system_topics.decision import REJECTED, Action, Verdict

PREFIX = "dedup_broker_ledger_deletion_"


class WorkerMetrics:
    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or new_registry()
        self.lock = threading.Lock()
        r = self.registry
        self.received = r.counter(PREFIX + "intents_received_total", "Intents read (main, RETRY)")
        self.deleted = r.counter(
            PREFIX + "ledgers_deleted_total",
            "Ledger copies deleted (or found already gone), by ledger type",
            ("type",),
        )
        self.rejected = r.counter(
            PREFIX + "intents_rejected_total",
            "Intents acknowledged without deleting anything, by reason",
            ("reason",),
        )
        self.failed = r.counter(PREFIX + "failed_total", "Attempts that failed (retried or DLQ)")
        self.retried = r.counter(PREFIX + "intents_retried_total", "Copies sent to RETRY")
        self.acknowledged = r.counter(
            PREFIX + "intents_acknowledged_total", "Intents committed (done with)"
        )
        self.max_retries = r.counter(
            PREFIX + "max_retries_reached_total", "Intents sent to the DLQ after the last retry"
        )

    def record(self, verdict: Verdict, action: Action, ledger_type: str = "ledger") -> None:
        with self.lock:
            if verdict in (Verdict.DELETED, Verdict.ALREADY_GONE):
                self.deleted.labels(type=ledger_type).inc()
            elif verdict in REJECTED:
                self.rejected.labels(reason=verdict.value).inc()
            else:
                self.failed.inc()
            if action is Action.RETRY:
                self.retried.inc()
            elif action is Action.DEAD_LETTER:
                self.max_retries.inc()

    def render(self) -> str:
        with self.lock:
            return self.registry.render()


def serve_metrics(metrics: WorkerMetrics, host: str, port: int) -> ThreadingHTTPServer:
    """Start ``GET /metrics`` and ``GET /health`` in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, kind = metrics.render().encode(), CONTENT_TYPE
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
