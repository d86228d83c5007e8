"""Admin errors as HTTP responses in Pulsar's shape, ``{"reason": "..."}``.

Handlers raise: ``HttpError`` when they decide the status themselves (a malformed body),
the broker's own errors otherwise. One middleware turns every failure into a response, with
one table from exception class to status; a feature adds its own entries to the table
(key deduplication: an invalid policy is a 400). A broker error the table does not name is
a 503 when retrying may help, else a 412; anything else is a 500 (and logged).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dedup_broker.errors import BrokerError, InvalidTopicNameError, TopicNotFoundError

__all__ = [
    "BROKER_ERROR_STATUSES",
    "ErrorStatuses",
    "HttpError",
    "error_middleware",
    "status_for",
]

log = logging.getLogger(__name__)

ErrorStatuses = Mapping[type[Exception], HTTPStatus]
"""Exception class -> status; a subclass not named itself takes its nearest base's status."""

BROKER_ERROR_STATUSES: ErrorStatuses = {
    TopicNotFoundError: HTTPStatus.NOT_FOUND,
    InvalidTopicNameError: HTTPStatus.PRECONDITION_FAILED,
}


class HttpError(Exception):
    """Ends a request with ``status`` and the body ``{"reason": reason}``."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def status_for(exc: Exception, statuses: ErrorStatuses) -> HTTPStatus:
    """The status answering ``exc``: the table, else by the broker's retry classification."""
    for cls in type(exc).__mro__:
        status = statuses.get(cls)
        if status is not None:
            return status
    if isinstance(exc, BrokerError):
        return HTTPStatus.SERVICE_UNAVAILABLE if exc.retriable else HTTPStatus.PRECONDITION_FAILED
    return HTTPStatus.INTERNAL_SERVER_ERROR


def _reason_response(
    status: HTTPStatus, reason: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response({"reason": reason}, status=int(status), headers=headers)


def _routing_reason(request: web.Request, exc: web.HTTPException) -> str:
    """aiohttp's own refusals (no route, wrong method, body too large) in plain words."""
    if isinstance(exc, web.HTTPNotFound):
        return f"no resource at {request.path}"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return f"method {request.method} not allowed"
    return exc.text or exc.reason


def error_middleware(statuses: ErrorStatuses) -> Middleware:
    """The middleware answering every failed request with ``{"reason": ...}``."""

    @web.middleware
    async def errors_as_reasons(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except HttpError as exc:
            return _reason_response(exc.status, exc.reason)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return _reason_response(HTTPStatus(exc.status), _routing_reason(request, exc), allow)
        except Exception as exc:
            status = status_for(exc, statuses)
            if status is HTTPStatus.INTERNAL_SERVER_ERROR:
                log.exception("admin handler for %s %s failed", request.method, request.path)
            return _reason_response(status, str(exc) or type(exc).__name__)

    return errors_as_reasons
