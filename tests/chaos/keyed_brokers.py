"""A broker with key-window deduplication on (keys from ``KEY_PROPERTY``), as the
key-window chaos tests start it, and what its admin API says of a topic's window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import redis

from dedup_broker.key_dedup.store import ScopeKeys, unpack_runs
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.key_events import KEY_PROPERTY
from tests.integration.conftest import make_broker


def start_keyed_broker(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, **settings: object
) -> BrokerProcess:
    """Started, with a 1 s Redis timeout (faults are noticed quickly); ``settings`` add to
    or override the key-window ones."""
    process = make_broker(
        kafka_bootstrap,
        tmp_path,
        **{
            "redis_url": redis_url,
            "broker_key_deduplication_enabled": True,
            "key_deduplication_key_source": f"property:{KEY_PROPERTY}",
            "key_deduplication_redis_timeout_seconds": 1.0,
            **settings,
        },
    )
    process.start()
    return process


def topic_key_stats(broker: BrokerProcess, topic: str) -> dict[str, object]:
    """The ``keyDeduplication`` part of the topic's stats (its scope, counters)."""
    short = topic.removeprefix("persistent://")
    status, body = http_request("GET", f"{broker.http_url}/admin/v2/persistent/{short}/stats")
    assert status == 200, body
    stats = json.loads(body)["keyDeduplication"]
    assert isinstance(stats, dict)
    return stats


def scope_of(stats: dict[str, object]) -> ScopeKeys:
    """The Redis names of the scope a topic's stats name (its layout included)."""
    return ScopeKeys(str(stats["scope"]), bool(stats.get("singleWriter")))


def keys_in_redis(node: redis.Redis, scope: ScopeKeys) -> tuple[set[bytes], list[bytes]]:
    """The keys Redis holds for ``scope`` and the bucket keys holding them: a single
    writer's packed lists, or the hashes of a scope with several writers."""
    kind = "k" if scope.single_writer else "b"
    buckets = list(node.scan_iter(match=f"kd:{{{scope.tag}}}:{kind}:*", count=1000))
    keys: set[bytes] = set()
    for bucket in buckets:
        if not scope.single_writer:
            keys.update(cast(list[bytes], node.hkeys(bucket)))
            continue
        for value in cast(list[bytes], node.lrange(bucket, 0, -1)):
            for _, packed in unpack_runs(value):
                keys.update(bytes(packed[i : i + 16]) for i in range(0, len(packed), 16))
    return keys, buckets
