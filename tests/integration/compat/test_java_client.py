"""The official Pulsar Java client (from Maven Central) produces and consumes unmodified."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from dedup_broker.devservers.pulsar_java import ensure_java_client, run_java_client
from dedup_broker.testing.broker_process import BrokerProcess
from tests.integration.conftest import make_broker

MAX_MESSAGE_SIZE = 100_000


@pytest.fixture(scope="module")
def java_client() -> Path:
    return ensure_java_client()


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    process = make_broker(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_enabled=True,
        max_message_size=MAX_MESSAGE_SIZE,
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _java(*args: str) -> list[str]:
    result = run_java_client(*args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "done", result.stdout[-2000:]
    return lines


def _stored(service_url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(service_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


def _sent_ids(lines: list[str]) -> list[str]:
    return [line.split()[2] for line in lines if line.startswith("sent ")]


@pytest.mark.parametrize("batching", ["none", "default", "key"])
def test_java_producer_stores_each_message_once_across_a_rerun(
    java_client: Path, dedup_broker: BrokerProcess, topic: str, batching: str
) -> None:
    count = 300
    args = ("produce", dedup_broker.service_url, topic, str(count), "name=java-app")
    first = _java(*args, f"batching={batching}", "key=k")
    assert first[0] == "last-sequence-id -1"
    assert all(not ident.startswith("-1:-1") for ident in _sent_ids(first))

    # The same producer name again: the broker remembers sequence id count-1 and the
    # client sees every resend as a duplicate.
    again = _java(*args, f"batching={batching}", "key=k")
    assert again[0] == f"last-sequence-id {count - 1}"

    stored = _stored(dedup_broker.service_url, topic)
    if batching == "key":
        # Key-based batching groups messages by key: order holds per key, not overall.
        assert sorted(stored) == sorted(f"m-{i}".encode() for i in range(count))
        for key in range(4):
            per_key = [m for m in stored if int(m[2:]) % 4 == key]
            assert per_key == sorted(per_key, key=lambda m: int(m[2:]))
    else:
        assert stored == [f"m-{i}".encode() for i in range(count)]


def test_java_chunked_messages_are_reassembled_and_deduplicated(
    java_client: Path, dedup_broker: BrokerProcess, topic: str
) -> None:
    size = 3 * MAX_MESSAGE_SIZE - 1000  # three chunks each
    count = 5
    args = ("produce", dedup_broker.service_url, topic, str(count), "name=java-chunks")
    _java(*args, "chunking=true", f"size={size}")
    again = _java(*args, "chunking=true", f"size={size}")
    assert again[0] == f"last-sequence-id {count - 1}"

    received = _java(
        "consume", dedup_broker.service_url, topic, "java-sub", str(count + 1), "timeoutMs=5000"
    )
    messages = [line.split() for line in received if line.startswith("received ")]
    assert [(m[2], m[3], m[4]) for m in messages] == [
        (str(i), str(size), f"m-{i}") for i in range(count)
    ]
    assert "timeout after 5" in received


def test_java_consumer_reads_what_the_python_producer_sent(
    java_client: Path, dedup_broker: BrokerProcess, topic: str
) -> None:
    client = pulsar.Client(dedup_broker.service_url)
    try:
        producer = client.create_producer(topic, producer_name="py-app")
        for i in range(50):
            producer.send_async(f"m-{i}".encode(), None, partition_key=f"k{i % 3}")
        producer.flush()
    finally:
        client.close()
    received = _java("consume", dedup_broker.service_url, topic, "java-sub", "50")
    assert [line.split()[1:] for line in received if line.startswith("received ")] == [
        [f"k{i % 3}", str(i), str(len(f"m-{i}")), f"m-{i}"] for i in range(50)
    ]
