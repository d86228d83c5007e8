"""Key-window deduplication in ``make bench``: the same stream with it off and on.

One broker, one Redis, two topics: the stream (property-keyed events, 20% repeats in
random order, batching on) goes to a topic without key deduplication and to one with it,
so the ratio compares like with like. Redis round trips per message come from the
broker's own counter.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pulsar

from bench.brokers import bench_broker
from dedup_broker.devservers import provide_redis
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.key_events import KEY_PROPERTY, make_events


def _publish(service_url: str, topic: str, events: list[str], size: int) -> float:
    """Messages per second from the first send to the last acknowledgement."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1,
        max_pending_messages=20000,
        block_if_queue_full=True,
    )
    padding = b"x" * max(size - 16, 0)
    finished = threading.Event()
    done = 0
    lock = threading.Lock()

    def sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        nonlocal done
        with lock:
            done += 1
            if done == len(events):
                finished.set()

    start = time.perf_counter()
    for event in events:
        producer.send_async(event.encode() + padding, sent, properties={KEY_PROPERTY: event})
    producer.flush()
    finished.wait(300)
    elapsed = time.perf_counter() - start
    client.close()
    return len(events) / elapsed


def _round_trips(broker: BrokerProcess) -> int:
    _, body = http_request("GET", f"{broker.http_url}/admin/v2/broker-stats/keyDeduplication")
    return int(json.loads(body)["redisRoundTrips"])


def key_dedup_rows(bootstrap: str, count: int, size: int) -> list[tuple[str, float]]:
    """(label, figure) rows: msgs/s off and on, their ratio, Redis round trips/message."""
    redis = provide_redis()
    broker = bench_broker(bootstrap, "kd", redis_url=redis.url)
    events = make_events(count * 4 // 5, count // 5, seed=5)
    try:
        with broker:
            base = f"public/default/bench-kd-{uuid.uuid4().hex[:8]}"
            off = _publish(broker.service_url, f"persistent://{base}-off", events, size)
            policy = {"enabled": True, "keySource": f"property:{KEY_PROPERTY}", "window": "1h"}
            status, body = http_request(
                "POST",
                f"{broker.http_url}/admin/v2/persistent/{base}-on/keyDeduplication",
                json.dumps(policy).encode(),
            )
            if status != 204:
                raise RuntimeError(f"setting the policy failed: {status} {body!r}")
            before = _round_trips(broker)
            on = _publish(broker.service_url, f"persistent://{base}-on", events, size)
            trips = _round_trips(broker) - before
    finally:
        redis.close()
    return [
        ("key dedup off (msgs/s)", off),
        ("key dedup on (msgs/s)", on),
        ("key dedup on / off", on / off),
        ("Redis round trips per message", trips / len(events)),
    ]
