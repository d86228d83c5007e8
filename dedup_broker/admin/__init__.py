"""The admin HTTP surface: Pulsar-shaped REST routes and ``/metrics``."""

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

__all__ = [
    "Handler",
    "HttpError",
    "HttpServer",
    "Request",
    "Response",
    "Router",
    "json_response",
    "no_content",
    "text_response",
]
