"""Pattern (regex) subscriptions with the official client: a consumer subscribed to a
pattern receives from the matching topics, including topics created after it subscribed,
on one broker and when the topic is created through another broker of the cluster.

The Python client finds new topics by polling GET_TOPICS_OF_NAMESPACE (its C++ core sends
no WATCH_TOPIC_LIST). Its wrapper (3.13) drops ``pattern_auto_discovery_period`` on the
way to the C++ configuration, which then polls every 60 s; the tests set the period on
that configuration directly.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import _pulsar
import pulsar
import pytest

from harness.cluster_processes import ClusterProcesses

DISCOVERY_DEADLINE_SECONDS = 30.0
DISCOVERY_PERIOD_SECONDS = 1


class _FastDiscoveryConfiguration(_pulsar.ConsumerConfiguration):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.pattern_auto_discovery_period(DISCOVERY_PERIOD_SECONDS)


@pytest.fixture(autouse=True)
def fast_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pulsar, "ConsumerConfiguration", _FastDiscoveryConfiguration)


def _receive_all(consumer: pulsar.Consumer, expected: int) -> list[tuple[str, bytes]]:
    """What the consumer gets within the deadline: (topic, payload), acknowledged."""
    out: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + DISCOVERY_DEADLINE_SECONDS
    while len(out) < expected and time.monotonic() < deadline:
        try:
            message = consumer.receive(timeout_millis=500)
        except pulsar.Timeout:
            continue
        out.append((message.topic_name(), message.data()))
        consumer.acknowledge(message)
    return out


def _send(client: pulsar.Client, topic: str, payload: bytes) -> None:
    producer = client.create_producer(topic)
    producer.send(payload)
    producer.close()


def test_pattern_consumer_finds_topics_created_after_it_subscribed(
    client: pulsar.Client,
) -> None:
    prefix = f"persistent://public/default/pat-{uuid.uuid4().hex[:8]}"
    _send(client, f"{prefix}-old", b"old")
    _send(client, f"{prefix}x-other", b"not matching")
    consumer = client.subscribe(
        re.compile(f"{prefix}-.*"),
        "pattern-sub",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    try:
        assert _receive_all(consumer, 1) == [(f"{prefix}-old", b"old")]
        _send(client, f"{prefix}-new", b"new")
        assert _receive_all(consumer, 1) == [(f"{prefix}-new", b"new")]
        _send(client, f"{prefix}x-other", b"still not matching")
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=2500)
    finally:
        consumer.close()


@pytest.fixture
def two_brokers(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ClusterProcesses]:
    processes = ClusterProcesses(kafka_bootstrap, tmp_path, size=2)
    try:
        processes.start()
        yield processes
    finally:
        processes.stop()


def test_pattern_consumer_finds_a_topic_created_through_another_broker(
    two_brokers: ClusterProcesses,
) -> None:
    prefix = f"persistent://public/default/cpat-{uuid.uuid4().hex[:8]}"
    consuming = pulsar.Client(two_brokers[0].service_url, operation_timeout_seconds=30)
    producing = pulsar.Client(two_brokers[1].service_url, operation_timeout_seconds=30)
    try:
        consumer = consuming.subscribe(
            re.compile(f"{prefix}-.*"),
            "pattern-sub",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        # Several topics, so that some are owned by the broker the consumer does not use.
        topics = [f"{prefix}-{i}" for i in range(6)]
        for i, topic in enumerate(topics):
            _send(producing, topic, f"m-{i}".encode())
        received = _receive_all(consumer, len(topics))
        assert sorted(received) == sorted((t, f"m-{i}".encode()) for i, t in enumerate(topics))
        consumer.close()
    finally:
        consuming.close()
        producing.close()
