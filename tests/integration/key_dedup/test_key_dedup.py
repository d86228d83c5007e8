"""Key-window deduplication with the official client, real Kafka and real Redis.

A source with no sequence ids sends events with 20% repeats in random order, batching
on; the topic must hold each event exactly once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from harness.admin_http import create_namespace, http_request
from harness.broker_process import BrokerProcess
from harness.key_events import (
    KEY_PROPERTY,
    Publisher,
    drain_partition,
    make_events,
    producer_for,
    stored_event_ids,
)
from tests.integration.conftest import serve


@pytest.fixture
def kd_broker(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, redis_url=redis_url)


def set_policy(broker: BrokerProcess, path: str, policy: dict[str, object]) -> None:
    status, body = http_request(
        "POST", f"{broker.http_url}/admin/v2/{path}/keyDeduplication", json.dumps(policy).encode()
    )
    assert status == 204, body


def assert_each_once(stored: list[str], events: list[str]) -> None:
    counts = Counter(stored)
    assert [e for e, n in counts.items() if n > 1] == []
    assert set(counts) == set(events)


def test_property_keys_20k_events_with_repeats_each_stored_once(
    kd_broker: BrokerProcess, topic: str
) -> None:
    short = topic.removeprefix("persistent://")
    set_policy(
        kd_broker, f"persistent/{short}", {"enabled": True, "keySource": f"property:{KEY_PROPERTY}"}
    )
    events = make_events(16_000, 4_000, seed=1)
    client = pulsar.Client(kd_broker.service_url, operation_timeout_seconds=60)
    try:
        publisher = Publisher([producer_for(client, topic)], events).start()
        publisher.wait()
        stored = stored_event_ids(client, topic)
        assert len(stored) == 16_000
        assert_each_once(stored, events)
        _, body = http_request("GET", f"{kd_broker.http_url}/admin/v2/persistent/{short}/stats")
        stats = json.loads(body)["keyDeduplication"]
        assert stats["repeatsDropped"] == 4_000
        assert stats["messagesKept"] == 16_000
        metrics = http_request("GET", f"{kd_broker.http_url}/metrics")[1].decode()
        namespace = f'{{cluster="{kd_broker.cluster_name}",namespace="public/default"}}'
        assert f"dedup_broker_key_dedup_hits_total{namespace} 4000" in metrics
        assert f"dedup_broker_key_dedup_misses_total{namespace} 16000" in metrics
        assert f"dedup_broker_key_dedup_redis_latency_seconds_count{namespace}" in metrics
        assert 'dedup_broker_key_dedup_keys_tracked{scope="' in metrics
    finally:
        client.close()


def test_content_keys_drop_byte_identical_repeats(kd_broker: BrokerProcess, topic: str) -> None:
    short = topic.removeprefix("persistent://")
    set_policy(kd_broker, f"persistent/{short}", {"enabled": True, "keySource": "content"})
    events = make_events(3_000, 750, seed=2)
    client = pulsar.Client(kd_broker.service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=100,
            compression_type=pulsar.CompressionType.LZ4,
            send_timeout_millis=0,
            block_if_queue_full=True,
        )
        Publisher([producer], events, content_keyed=True).start().wait()
        stored = stored_event_ids(client, topic, read=lambda m: m.data().decode())
        assert len(stored) == 3_000
        assert_each_once(stored, events)
    finally:
        client.close()


def test_namespace_scope_spans_two_topics(kd_broker: BrokerProcess) -> None:
    namespace = f"public/kd-{uuid.uuid4().hex[:8]}"
    create_namespace(kd_broker.http_url, namespace, kd_broker.cluster_name)
    set_policy(
        kd_broker,
        f"namespaces/{namespace}",
        {"enabled": True, "keySource": f"property:{KEY_PROPERTY}", "scope": "namespace"},
    )
    topics = [f"persistent://{namespace}/a", f"persistent://{namespace}/b"]
    events = make_events(3_000, 750, seed=3)
    client = pulsar.Client(kd_broker.service_url, operation_timeout_seconds=60)
    try:
        producers = [producer_for(client, t) for t in topics]
        Publisher(producers, events).start().wait()
        stored = stored_event_ids(client, topics[0]) + stored_event_ids(client, topics[1])
        assert len(stored) == 3_000
        assert_each_once(stored, events)
        assert all(stored_event_ids(client, t) for t in topics)
    finally:
        client.close()


def test_topic_scope_spans_the_partitions_of_a_partitioned_topic(
    kd_broker: BrokerProcess, topic: str
) -> None:
    short = topic.removeprefix("persistent://")
    status, body = http_request(
        "PUT", f"{kd_broker.http_url}/admin/v2/persistent/{short}/partitions", b"3"
    )
    assert status == 204, body
    set_policy(
        kd_broker, f"persistent/{short}", {"enabled": True, "keySource": f"property:{KEY_PROPERTY}"}
    )
    events = make_events(3_000, 750, seed=4)
    client = pulsar.Client(kd_broker.service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=100,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            send_timeout_millis=0,
            block_if_queue_full=True,
        )
        Publisher([producer], events).start().wait()
        per_partition = [drain_partition(client, f"{topic}-partition-{i}") for i in range(3)]
        stored = [e for part in per_partition for e in part]
        assert len(stored) == 3_000
        assert_each_once(stored, events)
        assert all(per_partition)
    finally:
        client.close()


def test_a_repeat_inside_the_window_is_dropped_after_it_stored(
    kd_broker: BrokerProcess, topic: str
) -> None:
    short = topic.removeprefix("persistent://")
    set_policy(
        kd_broker,
        f"persistent/{short}",
        {"enabled": True, "keySource": "partitionKey", "window": "3s"},
    )
    client = pulsar.Client(kd_broker.service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        first = producer.send(b"first", partition_key="order-1")
        inside = producer.send(b"inside", partition_key="order-1")
        assert first.entry_id() >= 0
        assert (inside.ledger_id(), inside.entry_id()) == (-1, -1)
        time.sleep(3.5)
        after = producer.send(b"after", partition_key="order-1")
        assert after.entry_id() >= 0
        other = producer.send(b"other", partition_key="order-2")
        assert other.entry_id() >= 0
        stored = stored_event_ids(client, topic, read=lambda m: m.data().decode())
        assert stored == ["first", "after", "other"]
    finally:
        client.close()


def test_policy_admin_round_trip_and_validation(kd_broker: BrokerProcess, topic: str) -> None:
    short = topic.removeprefix("persistent://")
    base = f"{kd_broker.http_url}/admin/v2/persistent/{short}/keyDeduplication"
    status, body = http_request("POST", base, b'{"enabled": true, "keySource": "bogus"}')
    assert status == 400, body
    status, body = http_request("POST", base, b'{"enabled": true, "window": "2h"}')
    assert status == 204, body
    assert json.loads(http_request("GET", base)[1]) == {"enabled": True, "window": "2h"}
    applied = json.loads(http_request("GET", base + "?applied=true")[1])
    assert applied == {
        "enabled": True,
        "keySource": "content",
        "window": "2h",
        "scope": "topic",
        "onRedisUnavailable": "reject",
    }
    assert http_request("DELETE", base)[0] == 204
    assert json.loads(http_request("GET", base)[1]) is None


def test_with_pip6_on_the_same_topic_sequence_ids_stay_consistent(
    kd_broker: BrokerProcess, topic: str
) -> None:
    short = topic.removeprefix("persistent://")
    assert (
        http_request(
            "POST",
            f"{kd_broker.http_url}/admin/v2/persistent/{short}/deduplicationEnabled",
            b"true",
        )[0]
        == 204
    )
    set_policy(kd_broker, f"persistent/{short}", {"enabled": True, "keySource": "content"})
    # ids 150..199 repeat earlier events; the last batch mixes repeats and new ones.
    payloads = [f"e{i}".encode() for i in range(150)]
    payloads += [f"e{i}".encode() for i in range(50)] + [f"e{i}".encode() for i in range(150, 160)]
    client = pulsar.Client(kd_broker.service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(
            topic, producer_name="both", batching_enabled=True, batching_max_messages=40
        )
        for i, payload in enumerate(payloads):
            producer.send_async(payload, None, sequence_id=i)
        producer.flush()
        producer.close()
        again = client.create_producer(topic, producer_name="both", batching_enabled=False)
        assert again.last_sequence_id() == 209
        resent = again.send(b"e0-resent", sequence_id=120)  # PIP-6: below the high-water mark
        assert (resent.ledger_id(), resent.entry_id()) == (-1, -1)
        repeat = again.send(b"e3", sequence_id=210)  # key repeat with a new sequence id
        assert (repeat.ledger_id(), repeat.entry_id()) == (-1, -1)
        fresh = again.send(b"fresh", sequence_id=211)
        assert fresh.entry_id() >= 0
        stored = stored_event_ids(client, topic, read=lambda m: m.data().decode())
        assert stored == [f"e{i}" for i in range(160)] + ["fresh"]
    finally:
        client.close()
