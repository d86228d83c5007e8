"""HTTP authentication: every admin and lookup request proves who it is first."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dedup_broker.security.authentication import AuthenticationError, Authenticator
from dedup_broker.security.tls import PeerCertificate, peer_certificate

UNAUTHENTICATED_PATHS = frozenset({"/metrics", "/admin/v2/brokers/health"})
"""Liveness and metrics stay open, for probes and scrapers (as Pulsar's
``authenticateMetricsEndpoint=false``)."""


def request_certificate(request: web.Request) -> PeerCertificate | None:
    """The verified client certificate of an HTTPS request (None over plain HTTP)."""
    transport = request.transport
    if transport is None:
        return None
    return peer_certificate(transport.get_extra_info("ssl_object"))


def authentication_middleware(authenticator: Authenticator) -> Middleware:
    """401 with Pulsar's reason shape unless the request authenticates; the role is
    ``request["role"]``."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if authenticator.enabled and request.path.rstrip("/") not in UNAUTHENTICATED_PATHS:
            try:
                request["role"] = authenticator.authenticate_http(
                    request.headers, request_certificate(request)
                )
            except AuthenticationError as exc:
                return web.json_response(
                    {"reason": f"Authentication required: {exc}"},
                    status=HTTPStatus.UNAUTHORIZED,
                    headers={"WWW-Authenticate": 'Bearer realm="pulsar"'},
                )
        return await handler(request)

    return authenticate
