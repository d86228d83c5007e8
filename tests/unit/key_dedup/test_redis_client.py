"""``redisUrl`` forms: the Sentinel URL taken apart, malformed ones refused as
configuration errors, and the client each form gets (built without connecting)."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError
from dedup_broker.key_dedup.redis_client import redis_client
from dedup_broker.redis_url import (
    ClusterUrl,
    RedisUrlError,
    SentinelUrl,
    check_redis_url,
    is_cluster_url,
    is_sentinel_url,
    parse_cluster_url,
    parse_sentinel_url,
)


def test_a_sentinel_url_names_the_sentinels_the_master_and_the_database() -> None:
    url = parse_sentinel_url("redis+sentinel://10.0.0.1:26380,sentinel-b,[::1]:5000/orders/3")
    assert url == SentinelUrl(
        sentinels=(("10.0.0.1", 26380), ("sentinel-b", 26379), ("::1", 5000)),
        master="orders",
        db=3,
    )
    assert not url.tls


def test_credentials_and_tls() -> None:
    url = parse_sentinel_url("rediss+sentinel://app:p%40ss@h1:1,h2:2/mymaster")
    assert (url.username, url.password, url.tls, url.db) == ("app", "p@ss", True, 0)
    alone = parse_sentinel_url("redis+sentinel://:secret@h1:1/m")
    assert (alone.username, alone.password) == (None, "secret")
    bare = parse_sentinel_url("redis+sentinel://secret@h1:1/m")
    assert (bare.username, bare.password) == (None, "secret")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis+sentinel://h1:26379", "names the monitored master"),
        ("redis+sentinel://h1:26379/", "names the monitored master"),
        ("redis+sentinel://h1:26379/m/x", "only a database number"),
        ("redis+sentinel://h1:26379/m/0/extra", "only a database number"),
        ("redis+sentinel://h1:0/m", "no TCP port"),
        ("redis+sentinel://h1:70000/m", "no TCP port"),
        ("redis+sentinel://h1:port/m", "no TCP port"),
        ("redis+sentinel://h1:1,,h2:2/m", "host is empty"),
        ("redis+sentinel:///m", "host is empty"),
        ("redis+sentinel://[::1:1/m", "IPv6"),
        ("redis+sentinel://h1:1/m?db=2", "no query"),
        ("redis+sentinel://h1:1/my master", "master name"),
    ],
)
def test_malformed_sentinel_urls_say_what_is_wrong(url: str, reason: str) -> None:
    with pytest.raises(RedisUrlError, match=reason):
        parse_sentinel_url(url)


def test_the_password_stays_out_of_error_messages() -> None:
    with pytest.raises(RedisUrlError) as caught:
        parse_sentinel_url("redis+sentinel://app:hunter2@h1:1")
    assert "hunter2" not in str(caught.value)


def test_url_kinds() -> None:
    assert is_sentinel_url("REDIS+SENTINEL://h:1/m") and is_sentinel_url("rediss+sentinel://h/m")
    assert not is_sentinel_url("redis://h:1/0")
    assert is_cluster_url("rediss+cluster://h:1") and not is_cluster_url("redis://h:1")
    for good in ("redis://h:6379/0", "rediss://h", "unix:///run/redis.sock", "redis+cluster://h"):
        check_redis_url(good)
    with pytest.raises(RedisUrlError, match="starts with one of"):
        check_redis_url("http://h:6379")
    with pytest.raises(RedisUrlError, match="starts with one of"):
        check_redis_url("localhost:6379")


def test_a_malformed_redis_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match=r"redisUrl: .*names the monitored master"):
        BrokerConfig.load(environ={}, overrides={"redis_url": "redis+sentinel://h1:26379"})
    with pytest.raises(ConfigError, match="redisUrl"):
        BrokerConfig.load(environ={}, overrides={"redis_url": "sentinel://h1:26379/m"})
    with pytest.raises(ConfigError, match="redisClusterEnabled"):
        BrokerConfig.load(
            environ={},
            overrides={"redis_url": "redis+sentinel://h/m", "redis_cluster_enabled": True},
        )
    good = BrokerConfig.load(environ={}, overrides={"redis_url": "redis+sentinel://h1:1/m/2"})
    assert good.redis_url == "redis+sentinel://h1:1/m/2"


def test_each_form_gets_its_client_without_connecting() -> None:
    async def build() -> None:
        options = {"socket_timeout": 1.5, "socket_connect_timeout": 1.5}
        plain = redis_client("redis://127.0.0.1:1/0", options)
        assert plain.connection_pool.connection_class.__name__ == ("HiredisPackedConnection")
        await plain.aclose()
        cluster = redis_client("redis+cluster://127.0.0.1:1,127.0.0.1:2", options)
        assert isinstance(cluster, RedisCluster)
        assert [n.port for n in cluster.nodes_manager.startup_nodes.values()] == [1, 2]
        await cluster.aclose()
        primary = redis_client("redis+sentinel://127.0.0.1:1,127.0.0.1:2/orders/4", options)
        pool = primary.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        assert pool.service_name == "orders" and pool.is_master
        assert pool.connection_kwargs["db"] == 4
        assert pool.connection_class.__name__ == "HiredisPackedSentinelManagedConnection"
        sentinels = pool.sentinel_manager.sentinels
        assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 2]
        assert sentinels[0].connection_pool.connection_kwargs["socket_timeout"] == 1.5
        await primary.aclose()

    asyncio.run(build())


def test_a_tls_sentinel_url_speaks_tls_to_sentinels_and_data_nodes() -> None:
    async def build() -> None:
        options = {"socket_timeout": 1.0, "ssl_ca_certs": "/etc/ca.pem"}
        primary = redis_client("rediss+sentinel://127.0.0.1:1/m", options)
        pool = primary.connection_pool
        assert issubclass(pool.connection_class, SentinelManagedSSLConnection)
        assert pool.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"
        sentinel = pool.sentinel_manager.sentinels[0].connection_pool
        assert sentinel.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"
        assert "SSL" in sentinel.connection_class.__name__
        await primary.aclose()

    asyncio.run(build())


def test_a_cluster_url_names_its_startup_nodes() -> None:
    url = parse_cluster_url("rediss+cluster://app:p%40ss@10.0.0.1:7000,node-b,[::1]:7002")
    assert url == ClusterUrl(
        nodes=(("10.0.0.1", 7000), ("node-b", 6379), ("::1", 7002)),
        username="app",
        password="p@ss",
        tls=True,
    )
    assert parse_cluster_url("redis+cluster://h:7000/0").nodes == (("h", 7000),)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis+cluster://h:7000/1", "database 0 only"),
        ("redis+cluster://h:7000,,h2:7001", "host is empty"),
        ("redis+cluster://h:port", "no TCP port"),
        ("redis+cluster://h:7000?x=1", "no query"),
    ],
)
def test_malformed_cluster_urls_say_what_is_wrong(url: str, reason: str) -> None:
    with pytest.raises(RedisUrlError, match=reason):
        check_redis_url(url)
