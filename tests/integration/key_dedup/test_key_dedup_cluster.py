"""Key-window deduplication on a real Redis Cluster (three native masters)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
import redis

from dedup_broker.devservers.redis_cluster import NativeRedisCluster
from harness.admin_http import http_request
from harness.broker_process import free_port
from harness.key_events import (
    KEY_PROPERTY,
    Publisher,
    make_events,
    producer_for,
    stored_event_ids,
)
from tests.chaos.keyed_brokers import keys_in_redis, scope_of
from tests.integration.conftest import make_broker


@pytest.fixture
def redis_cluster() -> Iterator[NativeRedisCluster]:
    with NativeRedisCluster(nodes=3) as cluster:
        yield cluster


def test_each_event_once_with_scopes_spread_over_the_cluster(
    kafka_bootstrap: str, redis_cluster: NativeRedisCluster, tmp_path: Path, unique_name: object
) -> None:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        redis_url=redis_cluster.url,
        broker_key_deduplication_enabled=True,
        key_deduplication_key_source=f"property:{KEY_PROPERTY}",
    )
    broker.start()
    topics = [f"persistent://public/default/kd-cluster-{i}-{tmp_path.name[-6:]}" for i in range(4)]
    events = make_events(1_000, 250, seed=21)
    try:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
        try:
            for topic in topics:
                Publisher([producer_for(client, topic)], events).start().wait()
            for topic in topics:
                counts = Counter(stored_event_ids(client, topic))
                assert set(counts) == set(events)
                assert max(counts.values()) == 1
        finally:
            client.close()
        scopes = []
        for topic in topics:
            short = topic.removeprefix("persistent://")
            _, body = http_request("GET", f"{broker.http_url}/admin/v2/persistent/{short}/stats")
            scopes.append(scope_of(json.loads(body)["keyDeduplication"]))
    finally:
        broker.stop()
    # Every scope's keys live in one slot (its hash tag); the scopes spread over nodes.
    cluster = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    owners = set()
    try:
        for scope in scopes:
            assert cluster.exists(scope.marker)
            owner = cluster.get_node_from_key(scope.marker)
            owners.add(owner.port)
            node = redis.Redis(port=owner.port)
            try:
                keys, buckets = keys_in_redis(node, scope)
                assert len(keys) == 1_000 and buckets
                assert {cluster.keyslot(b) for b in buckets} == {cluster.keyslot(scope.marker)}
            finally:
                node.close()
    finally:
        cluster.close()
    assert owners <= set(redis_cluster.ports)


def test_a_startup_node_down_leaves_the_others_of_the_url(
    kafka_bootstrap: str, redis_cluster: NativeRedisCluster, tmp_path: Path
) -> None:
    """``redis+cluster://`` lists several nodes: a broker starting while the first is
    unreachable finds the cluster through the next one."""
    nodes = [f"127.0.0.1:{free_port()}"] + [f"127.0.0.1:{p}" for p in redis_cluster.ports[1:]]
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        redis_url="redis+cluster://" + ",".join(nodes),
        broker_key_deduplication_enabled=True,
        key_deduplication_key_source=f"property:{KEY_PROPERTY}",
    )
    broker.start()
    topic = f"persistent://public/default/kd-startup-{tmp_path.name[-6:]}"
    events = make_events(300, 100, seed=5)
    try:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
        try:
            Publisher([producer_for(client, topic)], events).start().wait()
            counts = Counter(stored_event_ids(client, topic))
        finally:
            client.close()
    finally:
        broker.stop()
    assert set(counts) == set(events)
    assert max(counts.values()) == 1
