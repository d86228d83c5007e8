"""The Redis the tests get behaves as key-window deduplication assumes: SET NX with an
expiry, expiry itself, and pipelines (plain and MULTI/EXEC) returning results in order."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield connection
    connection.close()


@pytest.fixture
def prefix(redis_client: redis.Redis, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("redis-basics")
    yield name
    keys = list(redis_client.scan_iter(match=f"{name}:*"))
    if keys:
        redis_client.delete(*keys)


def test_set_with_expiry_reads_back_then_expires(redis_client: redis.Redis, prefix: str) -> None:
    key = f"{prefix}:window"
    assert redis_client.set(key, b"\x00seen\xff", nx=True, px=400) is True
    assert redis_client.set(key, b"other", nx=True, px=400) is None
    assert redis_client.get(key) == b"\x00seen\xff"
    assert 0 < redis_client.pttl(key) <= 400
    deadline = time.monotonic() + 5
    while redis_client.exists(key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.get(key) is None
    assert redis_client.set(key, b"again", nx=True, ex=60) is True
    assert redis_client.get(key) == b"again"


def test_pipelines_return_results_in_order(redis_client: redis.Redis, prefix: str) -> None:
    counter, value = f"{prefix}:counter", f"{prefix}:value"
    with redis_client.pipeline(transaction=True) as pipe:
        pipe.incr(counter)
        pipe.incrby(counter, 41)
        pipe.set(value, b"v1", px=60_000)
        pipe.get(value)
        pipe.set(value, b"v2", nx=True)
        results = pipe.execute()
    assert results == [1, 42, True, b"v1", None]

    with redis_client.pipeline(transaction=False) as pipe:
        for n in range(5):
            pipe.rpush(f"{prefix}:list", f"item-{n}")
        pipe.lrange(f"{prefix}:list", 0, -1)
        results = pipe.execute()
    assert results == [1, 2, 3, 4, 5, [f"item-{n}".encode() for n in range(5)]]
    assert 0 < redis_client.pttl(value) <= 60_000
    assert redis_client.ttl(counter) == -1
