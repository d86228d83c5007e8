"""Pulsar's admin path shapes and what they name, shared by every route module."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dedup_broker.admin.http import Handler, Request, Router
from dedup_broker.domain.names import TopicName

TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
NAMESPACES = "/admin/v2/namespaces/{tenant}/{namespace}"

Route = tuple[str, str, Handler]
"""``(method, path pattern, handler)``."""


def register(router: Router, routes: Iterable[Route], wrap: Callable[[Handler], Handler]) -> None:
    for method, pattern, handler in routes:
        router.add(method, pattern, wrap(handler))


def namespace_of(request: Request) -> str:
    """``tenant/namespace`` of a path matched by ``NAMESPACES`` or ``TOPIC``."""
    return f"{request.params['tenant']}/{request.params['namespace']}"


def topic_of(request: Request) -> TopicName:
    """The persistent topic a path matched by ``TOPIC`` names."""
    p = request.params
    return TopicName.parse(f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}")
