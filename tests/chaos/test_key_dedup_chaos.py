"""Key-window deduplication under failure: a broker kill -9, a Redis FLUSHALL, a Redis
stopped for 1 s and for 10 s. A source with no sequence ids keeps sending events with repeats and
resends whatever was not acknowledged; every event must be stored exactly once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
import redis

from dedup_broker.devservers import RedisService
from harness.broker_process import BrokerProcess
from harness.key_events import (
    Publisher,
    make_events,
    producer_for,
    stored_event_ids,
)
from tests.chaos.keyed_brokers import keys_in_redis, scope_of, start_keyed_broker, topic_key_stats

pytestmark = pytest.mark.chaos

UNIQUE = 6_000
REPEATS = 1_500
RATE = 1_500.0
"""Events per second: the run lasts about 5 s, so the disruption lands inside it."""


def _run(broker: BrokerProcess, topic: str, seed: int, disrupt: Callable[[], None]) -> list[str]:
    events = make_events(UNIQUE, REPEATS, seed=seed)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    try:
        publisher = Publisher([producer_for(client, topic)], events, rate=RATE).start()
        publisher.wait_for(len(events) // 3)
        before = publisher.acknowledged
        disrupt()
        assert before < len(events) // 2, "the disruption must hit the run mid-way"
        publisher.wait(timeout=300)
        stored = stored_event_ids(client, topic)
    finally:
        client.close()
    counts = Counter(stored)
    assert [e for e, n in counts.items() if n > 1] == []
    assert set(counts) == set(events)
    assert len(stored) == UNIQUE
    return stored


@pytest.fixture
def own_redis(native_redis: RedisService) -> RedisService:
    return native_redis


def test_broker_kill_9_mid_run_forgets_no_stored_key(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, topic: str
) -> None:
    broker = start_keyed_broker(kafka_bootstrap, redis_url, tmp_path)
    try:
        _run(broker, topic, seed=11, disrupt=lambda: broker.restart(kill=True))
    finally:
        broker.stop()


def test_redis_flushall_mid_run_rebuilds_the_window_from_the_log(
    kafka_bootstrap: str, own_redis: RedisService, tmp_path: Path, topic: str
) -> None:
    broker = start_keyed_broker(kafka_bootstrap, own_redis.url, tmp_path)

    def flush() -> None:
        connection = redis.Redis.from_url(own_redis.url)
        try:
            connection.flushall()
        finally:
            connection.close()

    try:
        _run(broker, topic, seed=12, disrupt=flush)
        stats = topic_key_stats(broker, topic)
        assert isinstance(stats["rebuilds"], int) and stats["rebuilds"] >= 2
    finally:
        broker.stop()


@pytest.mark.parametrize(("seconds", "errors"), [(1.0, False), (10.0, True)])
def test_redis_stopped_stores_no_duplicate_and_a_short_stop_no_send_error(
    kafka_bootstrap: str,
    own_redis: RedisService,
    tmp_path: Path,
    topic: str,
    seconds: float,
    errors: bool,
) -> None:
    """The broker asks Redis again for a few seconds before it fails a SEND (a retriable
    error): each error makes the client drop its connection, and every consumer on it."""
    broker = start_keyed_broker(kafka_bootstrap, own_redis.url, tmp_path)

    def outage() -> None:
        own_redis.stop()
        time.sleep(seconds)
        own_redis.start()

    try:
        _run(broker, topic, seed=13, disrupt=outage)
        stats = topic_key_stats(broker, topic)
        assert stats["state"] == "Ready"
        assert (stats["errors"] != 0) == errors
    finally:
        broker.stop()


@pytest.fixture
def accepting_broker(
    kafka_bootstrap: str, native_redis: RedisService, tmp_path: Path
) -> Iterator[tuple[BrokerProcess, RedisService]]:
    process = start_keyed_broker(
        kafka_bootstrap, native_redis.url, tmp_path, key_deduplication_on_redis_unavailable="accept"
    )
    try:
        yield process, native_redis
    finally:
        process.stop()


def test_accept_mode_keeps_publishing_while_redis_is_down_and_loses_nothing(
    accepting_broker: tuple[BrokerProcess, RedisService], topic: str
) -> None:
    broker, own_redis = accepting_broker
    events = make_events(1_000, 250, seed=14)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    try:
        producer = producer_for(client, topic)
        first = Publisher([producer], events[:500], rate=1_000).start()
        first.wait()
        own_redis.stop()
        try:
            Publisher([producer], events[500:]).start().wait(timeout=120)
        finally:
            own_redis.start()
        stored = stored_event_ids(client, topic)
    finally:
        client.close()
    counts = Counter(stored)
    # Availability first: every event is stored; the broker's own memory still caught
    # the repeats it had seen (one broker, nothing evicted), so none is stored twice.
    assert set(counts) == set(events)
    assert max(counts.values()) == 1


def test_keys_whose_confirmations_never_reached_redis_are_replayed_from_the_log(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path, topic: str
) -> None:
    """kill -9 right after writes, with Redis missing their keys and the checkpoint: the
    restarted broker reads the window back from the log before it accepts anything."""
    broker = start_keyed_broker(kafka_bootstrap, redis_url, tmp_path)
    events = make_events(2_000, 0, seed=15)
    try:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
        try:
            Publisher([producer_for(client, topic)], events).start().wait()
        finally:
            client.close()
        scope = scope_of(topic_key_stats(broker, topic))
        connection = redis.Redis.from_url(redis_url)
        try:
            # A single writer's copy reaches Redis about 50 ms after the receipts.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if len(keys_in_redis(connection, scope)[0]) == len(events):
                    break
                time.sleep(0.05)
            broker.kill()
            keys, lost = keys_in_redis(connection, scope)
            assert len(keys) == len(events)
            connection.delete(*lost, scope.checkpoints)
            assert connection.exists(scope.marker)
        finally:
            connection.close()
        broker.start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
        try:
            Publisher([producer_for(client, topic)], events).start().wait()
            stored = stored_event_ids(client, topic)
        finally:
            client.close()
        assert sorted(stored) == sorted(events)
        assert topic_key_stats(broker, topic)["repeatsDropped"] == len(events)
    finally:
        broker.stop()
