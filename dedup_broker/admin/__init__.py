"""The admin HTTP surface: Pulsar-shaped REST routes and Prometheus metrics."""

from __future__ import annotations

from dedup_broker.admin.http import (
    Handler,
    HttpError,
    HttpServer,
    Request,
    Response,
    Router,
    json_response,
    no_content,
    text_response,
)
from dedup_broker.admin.metrics import (
    CONTENT_TYPE,
    Counter,
    Gauge,
    Histogram,
    Registry,
    new_registry,
)

__all__ = [
    "CONTENT_TYPE",
    "Counter",
    "Gauge",
    "Handler",
    "Histogram",
    "HttpError",
    "HttpServer",
    "Registry",
    "Request",
    "Response",
    "Router",
    "json_response",
    "metrics_handler",
    "new_registry",
    "no_content",
    "text_response",
]


def metrics_handler(registry: Registry) -> Handler:
    """A handler serving ``registry`` for ``router.add("GET", "/metrics", ...)``."""

    async def handle(request: Request) -> Response:
        return text_response(registry.render(), content_type=CONTENT_TYPE)

    return handle
