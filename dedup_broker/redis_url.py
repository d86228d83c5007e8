"""The forms of ``redisUrl``: one Redis, a Redis Cluster, or a primary under Sentinel.

``redis://host:port/db`` (``rediss://`` over TLS, ``unix:///path``) is one Redis;
``redis+cluster://host1:port1,host2:port2`` (``rediss+cluster://``) nodes of a Redis
Cluster, any of which the broker may find the cluster through (one node down at start
leaves the others);
``redis+sentinel://host1:port1,host2:port2/<master-name>[/db]`` (``rediss+sentinel://``)
the Sentinels that watch a primary and its replicas: the broker asks them where the
primary is, and asks again after a failover. Pure parsing, no Redis client: the
configuration checks use it as well as the code that connects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

PLAIN_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379
"""Sentinel's own default port: the port of a Sentinel named without one."""
REDIS_PORT = 6379
"""Redis's own default port: the port of a cluster node named without one."""

_MASTER_NAME = re.compile(r"[A-Za-z0-9._:-]{1,200}")


class RedisUrlError(ValueError):
    """A ``redisUrl`` that names no Redis the broker could reach (the text says why)."""


@dataclass(frozen=True)
class SentinelUrl:
    """A ``redis+sentinel://`` URL, taken apart."""

    sentinels: tuple[tuple[str, int], ...]
    """``(host, port)`` of each Sentinel, in the URL's order."""
    master: str
    """The name the Sentinels monitor the primary under (``sentinel monitor <name> ...``)."""
    db: int = 0
    username: str | None = None
    password: str | None = None
    """Credentials of the data nodes (primary and replicas), not of the Sentinels."""
    tls: bool = False
    """``rediss+sentinel://``: Sentinels and data nodes both spoken to over TLS."""


@dataclass(frozen=True)
class ClusterUrl:
    """A ``redis+cluster://`` URL, taken apart."""

    nodes: tuple[tuple[str, int], ...]
    """``(host, port)`` of each startup node, in the URL's order."""
    username: str | None = None
    password: str | None = None
    tls: bool = False
    """``rediss+cluster://``: every node spoken to over TLS."""


def scheme_of(url: str) -> str:
    return url.partition("://")[0].lower() if "://" in url else ""


def is_cluster_url(url: str) -> bool:
    return scheme_of(url) in CLUSTER_SCHEMES


def is_sentinel_url(url: str) -> bool:
    return scheme_of(url) in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelUrl:
    """``redis+sentinel://[user:password@]host1:port1,host2:port2/<master-name>[/db]``.

    A Sentinel without a port is on 26379; an IPv6 address goes in brackets
    (``[::1]:26379``). Raises RedisUrlError naming what is malformed.
    """
    scheme, netloc, path = _parts(url, SENTINEL_SCHEMES, "a Sentinel URL")
    hosts, username, password = _credentials(netloc)
    sentinels = tuple(_host_port(part, url, SENTINEL_PORT, "Sentinel") for part in hosts.split(","))
    segments = path.split("/") if path else []
    if not segments or not segments[0]:
        raise RedisUrlError(
            f"a Sentinel URL names the monitored master after the hosts "
            f"(redis+sentinel://host:26379/mymaster), got {_safe(url)!r}"
        )
    master = unquote(segments[0])
    if not _MASTER_NAME.fullmatch(master):
        raise RedisUrlError(
            f"master name {master!r} of {_safe(url)!r}: 1-200 of [A-Za-z0-9._:-] expected"
        )
    db = 0
    if len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise RedisUrlError(
            f"after the master name only a database number may follow "
            f"(.../mymaster/0), got {_safe(url)!r}"
        )
    if len(segments) == 2:
        db = int(segments[1])
    return SentinelUrl(
        sentinels=sentinels,
        master=master,
        db=db,
        username=username,
        password=password,
        tls=scheme == "rediss+sentinel",
    )


def parse_cluster_url(url: str) -> ClusterUrl:
    """``redis+cluster://[user:password@]host1:port1[,host2:port2...][/0]``.

    A node without a port is on 6379; an IPv6 address goes in brackets. A Redis Cluster
    has database 0 only. Raises RedisUrlError naming what is malformed.
    """
    scheme, netloc, path = _parts(url, CLUSTER_SCHEMES, "a Redis Cluster URL")
    if path not in ("", "0"):
        raise RedisUrlError(
            f"a Redis Cluster has database 0 only; nothing but /0 may follow the nodes, "
            f"got {_safe(url)!r}"
        )
    hosts, username, password = _credentials(netloc)
    nodes = tuple(_host_port(part, url, REDIS_PORT, "cluster node") for part in hosts.split(","))
    return ClusterUrl(
        nodes=nodes,
        username=username,
        password=password,
        tls=scheme == "rediss+cluster",
    )


def check_redis_url(url: str) -> None:
    """Raises RedisUrlError when ``url`` is no form the broker connects with."""
    scheme = scheme_of(url)
    if scheme in SENTINEL_SCHEMES:
        parse_sentinel_url(url)
        return
    if scheme in CLUSTER_SCHEMES:
        parse_cluster_url(url)
        return
    if scheme not in PLAIN_SCHEMES + CLUSTER_SCHEMES:
        forms = ", ".join(f"{s}://" for s in PLAIN_SCHEMES + CLUSTER_SCHEMES + SENTINEL_SCHEMES)
        raise RedisUrlError(f"a Redis URL starts with one of {forms}; got {_safe(url)!r}")


def _parts(url: str, schemes: tuple[str, str], what: str) -> tuple[str, str, str]:
    """The lower-cased scheme, the hosts part and the path of ``url`` (one of ``schemes``,
    no query or fragment)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in schemes:
        raise RedisUrlError(f"{what} starts with {schemes[0]}:// or {schemes[1]}://, got {url!r}")
    if "?" in rest or "#" in rest:
        raise RedisUrlError(f"{what} takes no query or fragment, got {_safe(url)!r}")
    netloc, _, path = rest.partition("/")
    return scheme.lower(), netloc, path


def _credentials(netloc: str) -> tuple[str, str | None, str | None]:
    """``netloc`` split into its hosts, user name and password (percent-decoded)."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return netloc, None, None
    if not userinfo:
        return hosts, None, None
    user, colon, secret = userinfo.partition(":")
    if not colon:  # redis://secret@host is a password alone, as redis-py reads it
        return hosts, None, unquote(user)
    return hosts, unquote(user) or None, unquote(secret)


def _host_port(text: str, url: str, default_port: int, what: str) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):
        host, bracket, tail = text[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise RedisUrlError(f"malformed IPv6 {what} address {text!r} in {_safe(url)!r}")
        port_text = tail[1:] if tail else ""
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise RedisUrlError(f"a {what} host is empty in {_safe(url)!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise RedisUrlError(f"{what} port {port_text!r} of {_safe(url)!r} is no TCP port")
    return host, int(port_text)


def _safe(url: str) -> str:
    """``url`` with its password (if any) masked, for error messages."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not sep or not at:
        return url
    user = userinfo.partition(":")[0] if ":" in userinfo else ""
    return f"{scheme}://{user}:***@{hosts}{slash}{path}"
