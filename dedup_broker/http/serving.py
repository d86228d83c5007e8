"""The admin HTTP app on aiohttp, in the broker's own event loop.

Routes come from each feature's module as ``list[web.RouteDef]``. Matching does not depend
on the order features register in: the most specific path wins (segment by segment from
the left, a literal beats a ``{parameter}``), and a single trailing slash is ignored.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from dedup_broker.http.errors import ErrorStatuses, error_middleware

__all__ = ["MAX_BODY_BYTES", "HttpEndpoint", "new_app", "start_http"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 10 * 1024 * 1024
"""Upper bound of a request body; larger bodies are answered with 413."""
SHUTDOWN_GRACE_SECONDS = 5.0
"""How long stopping lets in-flight requests finish."""
_ACCEPT_BACKLOG = 1024


def _specificity(route: web.RouteDef) -> tuple[tuple[int, ...], str]:
    kinds = tuple(1 if "{" in part else 0 for part in route.path.split("/"))
    return kinds, route.path


def new_app(
    routes: Iterable[web.RouteDef],
    error_statuses: ErrorStatuses,
    middlewares: Iterable[Middleware] = (),
) -> web.Application:
    """An app serving ``routes``; failures are answered as ``error_statuses`` says.

    ``middlewares`` run inside the error handling (a redirect they raise goes out as is)."""
    app = web.Application(
        middlewares=[error_middleware(error_statuses), *middlewares],
        client_max_size=MAX_BODY_BYTES,
    )
    ordered = sorted(routes, key=_specificity)
    with_slash = [
        web.RouteDef(r.method, r.path + "/", r.handler, r.kwargs) for r in ordered if r.path != "/"
    ]
    app.add_routes([*ordered, *with_slash])
    return app


@dataclass(frozen=True)
class HttpEndpoint:
    """A started app: the ports it is bound to (the kernel's choice for port 0; None:
    that listener is off)."""

    runner: web.AppRunner
    port: int | None
    tls_port: int | None = None

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish briefly, close connections."""
        await self.runner.cleanup()


async def start_http(
    app: web.Application,
    host: str,
    port: int | None,
    tls_port: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> HttpEndpoint:
    """Serve ``app`` on ``host:port`` and, with ``ssl_context``, HTTPS on ``tls_port``,
    in the running event loop."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_SECONDS)
    await runner.setup()
    bound: list[int | None] = []
    try:
        for each, context in ((port, None), (tls_port if ssl_context else None, ssl_context)):
            if each is None:
                bound.append(None)
                continue
            before = len(runner.addresses)
            site = web.TCPSite(runner, host, each, backlog=_ACCEPT_BACKLOG, ssl_context=context)
            await site.start()
            bound.append(int(runner.addresses[before][1]))
            scheme = "HTTPS" if context is not None else "HTTP"
            log.info("admin %s server listening on %s:%d", scheme, host, bound[-1])
    except BaseException:
        await runner.cleanup()
        raise
    return HttpEndpoint(runner, bound[0], bound[1])
