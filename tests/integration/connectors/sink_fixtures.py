"""Fixtures and helpers of the sink tests: one SparkSession per test run, a dedup broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from connectors.local_spark import local_session
from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve

READ_MS = 10_000
EXTRA_WAIT_MS = 2_000


@pytest.fixture(scope="session")
def spark() -> Any:
    """``local[2,2]``: two tasks at once, each tried up to twice (as on a cluster)."""
    return local_session("local[2,2]", "dedup-broker-tests")


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own with PIP-6 deduplication on for every topic."""
    yield from serve(kafka_bootstrap, tmp_path, broker_deduplication_enabled=True)


def stored_messages(service_url: str, topic: str) -> list[pulsar.Message]:
    """Every message the topic (or one partition of it) holds, from the start."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        messages = []
        while reader.has_message_available():
            messages.append(reader.read_next(READ_MS))
        reader.close()
        return messages
    finally:
        client.close()


def stored_values(service_url: str, topic: str) -> list[str]:
    return [m.data().decode() for m in stored_messages(service_url, topic)]


def received_messages(service_url: str, topic: str, expected: int) -> list[pulsar.Message]:
    """Everything in a (partitioned) topic through a fresh subscription from the start.

    Reads until ``expected`` messages arrived (or nothing more comes for a while), then
    waits a little longer so that a duplicate beyond ``expected`` would be seen too.
    """
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic,
            f"check-{uuid.uuid4().hex[:8]}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        messages: list[pulsar.Message] = []
        while True:
            timeout = READ_MS if len(messages) < expected else EXTRA_WAIT_MS
            try:
                messages.append(consumer.receive(timeout))
            except pulsar.Timeout:
                return messages
    finally:
        client.close()


def stable_count(broker: BrokerProcess, topic: str) -> int:
    """The number of stored messages once it stopped changing (in-flight sends landed):
    the same count three times, two seconds apart (a busy machine can hold a send back
    longer than one second)."""
    counts: list[int] = []
    for _ in range(30):
        counts.append(len(stored_values(broker.service_url, topic)))
        if len(counts) >= 3 and counts[-1] == counts[-2] == counts[-3]:
            break
        time.sleep(2.0)
    return counts[-1]
