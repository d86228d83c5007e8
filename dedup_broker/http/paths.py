"""Pulsar's admin path shapes and what they name, shared by every route module."""

from __future__ import annotations

from aiohttp import web

from dedup_broker.domain_base.names import TopicName

__all__ = ["NAMESPACES", "TOPIC", "namespace_of", "query_flag", "query_value", "topic_of"]

TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
NAMESPACES = "/admin/v2/namespaces/{tenant}/{namespace}"


def namespace_of(request: web.Request) -> str:
    """``tenant/namespace`` of a path matched by ``NAMESPACES`` or ``TOPIC``."""
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


def topic_of(request: web.Request) -> TopicName:
    """The persistent topic a path matched by ``TOPIC`` names."""
    p = request.match_info
    return TopicName.parse(f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}")


def query_value(request: web.Request, name: str, default: str = "") -> str:
    """The last value of query parameter ``name`` (``default`` when absent)."""
    values = request.query.getall(name, [default])
    return values[-1]


def query_flag(request: web.Request, name: str) -> bool:
    """A query flag such as ``?force=true`` (also ``1`` or ``yes``)."""
    return query_value(request, name, "false").lower() in ("true", "1", "yes")
