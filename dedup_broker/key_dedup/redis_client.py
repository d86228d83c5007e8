"""The redis-py client of ``redisUrl``: one Redis, a Redis Cluster, or Sentinel's primary.

Under Sentinel the client asks the Sentinels where the primary is when it connects, and
again after a connection to it fails or it answers as a replica (``READONLY``): after a
failover the next call reaches the newly promoted primary. Calls made meanwhile fail as
any Redis outage does (the key store's callers wait and retry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection as AsyncConnection
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from dedup_broker.redis_url import (
    ClusterUrl,
    SentinelUrl,
    is_cluster_url,
    is_sentinel_url,
    parse_cluster_url,
    parse_sentinel_url,
)

__all__ = ["is_cluster_url", "is_sentinel_url", "packed_by_hiredis", "redis_client"]


def redis_client(url: str, options: Mapping[str, Any], cluster: bool = False) -> Any:
    """A client of ``url`` with redis-py's connection ``options`` (timeouts, TLS files);
    ``cluster``: a plain URL's Redis is a Redis Cluster node."""
    if is_sentinel_url(url):
        return _sentinel_primary(parse_sentinel_url(url), options)
    if is_cluster_url(url):
        return _cluster(parse_cluster_url(url), options)
    if cluster:
        return RedisCluster.from_url(url, **options)
    client = aioredis.Redis.from_url(url, **options)
    pool = client.connection_pool
    pool.connection_class = packed_by_hiredis(pool.connection_class)
    return client


def _cluster(url: ClusterUrl, options: Mapping[str, Any]) -> Any:
    """The cluster found through the first of ``url``'s nodes that answers."""
    node_options = dict(options)
    if url.tls:
        node_options["ssl"] = True
    else:
        node_options = {k: v for k, v in node_options.items() if not k.startswith("ssl")}
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in url.nodes],
        username=url.username,
        password=url.password,
        **node_options,
    )


class _SentinelPrimary(aioredis.Redis):
    """The primary's client; closing it closes the connections to the Sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        pool = self.connection_pool
        await super().aclose(close_connection_pool)
        if isinstance(pool, SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


def _sentinel_primary(url: SentinelUrl, options: Mapping[str, Any]) -> Any:
    tls = {"ssl": True, **{k: v for k, v in options.items() if k.startswith("ssl")}}
    sentinel_options: dict[str, Any] = {k: v for k, v in options.items() if k.startswith("socket_")}
    node_options: dict[str, Any] = dict(options)
    if url.tls:
        sentinel_options.update(tls)
        node_options.update(tls)
    else:
        node_options = {k: v for k, v in node_options.items() if not k.startswith("ssl")}
    sentinel = Sentinel(url.sentinels, sentinel_kwargs=sentinel_options, **node_options)
    client = sentinel.master_for(
        url.master,
        redis_class=_SentinelPrimary,
        db=url.db,
        username=url.username,
        password=url.password,
    )
    pool = client.connection_pool
    pool.connection_class = packed_by_hiredis(pool.connection_class)
    return client


def packed_by_hiredis(base: type[AsyncConnection]) -> type[AsyncConnection]:
    """``base`` (plain, TLS, Unix socket, or Sentinel-managed) packing commands with hiredis.

    redis-py's asyncio connections pack a command in Python, a step per argument, and a
    claim of a group's keys is thousands of arguments; hiredis (``redis[hiredis]``)
    packs them in C.
    """
    pack = hiredis.pack_command

    class HiredisPacked(base):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            name = args[0]  # "SCRIPT LOAD" and the like are two words for Redis
            if isinstance(name, str):
                name = name.encode()
            if b" " in name:
                return [pack((*name.split(), *args[1:]))]
            return [pack(args)]

    HiredisPacked.__name__ = HiredisPacked.__qualname__ = f"HiredisPacked{base.__name__}"
    return HiredisPacked
