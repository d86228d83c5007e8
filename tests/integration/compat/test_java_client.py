"""The official Pulsar Java client (from Maven Central) produces and consumes unmodified:
deduplication of resent sequence ids, key-based batching, chunked messages larger than
the broker's maxMessageSize, and messages of the official Python client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.pulsar_java import (
    Batching,
    ReceivedMessage,
    ensure_java_client,
    java_consume,
    java_payload,
    java_produce,
    sha256_hex,
)
from tests.integration.conftest import make_broker, serve

MAX_MESSAGE_SIZE = 100_000
BIG = 3 * MAX_MESSAGE_SIZE - 1000  # three chunks each (chunk payloads leave room for headers)


@pytest.fixture(scope="module")
def java_client() -> Path:
    return ensure_java_client()


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_enabled=True,
        max_message_size=MAX_MESSAGE_SIZE,
    )


def _stored(service_url: str, topic: str) -> list[bytes]:
    """Every message of the topic, in order, as the Python client's reader sees it."""
    client = pulsar.Client(service_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


def _expected(index: int, size: int = 0, key: str | None = None) -> tuple[object, ...]:
    payload = java_payload(index, size)
    value = payload.decode() if len(payload) <= 256 else None
    return (key, len(payload), sha256_hex(payload), value, index)


def _seen(messages: list[ReceivedMessage]) -> list[tuple[object, ...]]:
    return [(m.key, m.size, m.sha256, m.value, m.sequence_id) for m in messages]


@pytest.mark.parametrize("batching", ["none", "default"])
def test_java_producer_resent_range_is_stored_once(
    java_client: Path, dedup_broker: BrokerProcess, topic: str, batching: Batching
) -> None:
    url, count = dedup_broker.service_url, 200
    first = java_produce(
        url,
        topic,
        count,
        name="java-app",
        batching=batching,
        resend=(50, 149),
    )
    assert first.last_sequence_id == -1
    assert [m.sequence_id for m in first.sent] == list(range(count))
    assert not any(m.duplicate for m in first.sent)
    assert [m.sequence_id for m in first.resent] == list(range(50, 150))
    assert all(m.duplicate for m in first.resent)

    # A new producer of the same name: the broker remembers sequence id count-1 and
    # answers every resend as a duplicate.
    again = java_produce(url, topic, count, name="java-app", batching=batching)
    assert again.last_sequence_id == count - 1
    assert all(m.duplicate for m in again.sent)

    assert _stored(url, topic) == [java_payload(i) for i in range(count)]
    consumed = java_consume(url, topic, "java-sub", count + 1, timeout_ms=3000)
    assert _seen(consumed.messages) == [_expected(i) for i in range(count)]
    assert {m.producer_name for m in consumed.messages} == {"java-app"}
    assert consumed.timed_out


def test_java_key_based_batching_stores_every_message_once_in_order_per_key(
    java_client: Path, dedup_broker: BrokerProcess, topic: str
) -> None:
    url, count, keys = dedup_broker.service_url, 300, 4
    produced = java_produce(url, topic, count, name="java-keys", batching="key", keys=keys)
    assert [m.sequence_id for m in produced.sent] == list(range(count))
    assert not any(m.duplicate for m in produced.sent)

    consumed = java_consume(url, topic, "java-sub", count + 1, timeout_ms=3000)
    assert consumed.timed_out
    got = _seen(consumed.messages)
    # Key-based batching groups messages by key: order holds per key, not overall.
    assert sorted(got, key=lambda m: int(str(m[4]))) == [
        _expected(i, key=f"k{i % keys}") for i in range(count)
    ]
    for k in range(keys):
        per_key = [m[4] for m in got if m[0] == f"k{k}"]
        assert per_key == list(range(k, count, keys))
    assert sorted(_stored(url, topic)) == sorted(java_payload(i) for i in range(count))


def test_java_chunked_messages_arrive_whole_and_are_deduplicated(
    java_client: Path, dedup_broker: BrokerProcess, topic: str
) -> None:
    url, count = dedup_broker.service_url, 5
    first = java_produce(
        url, topic, count, name="java-chunks", chunking=True, size=BIG, resend=(1, 3)
    )
    assert first.last_sequence_id == -1
    assert [m.sequence_id for m in first.sent] == list(range(count))
    assert [m.sequence_id for m in first.resent] == [1, 2, 3]
    # A chunked message's id names its first and last chunk (three entries apart).
    assert [m.chunk_entries for m in first.sent] == [(3 * i, 3 * i + 2) for i in range(count)]
    # Every chunk of a resent message is judged: none is stored twice, each is answered
    # as a duplicate (the Java client then names neither chunk).
    assert [m.chunk_entries for m in first.resent] == [(-1, -1)] * 3
    assert all(m.duplicate for m in first.resent)
    assert not any(m.duplicate for m in first.sent)
    again = java_produce(url, topic, count, name="java-chunks", chunking=True, size=BIG)
    assert again.last_sequence_id == count - 1
    assert all(m.duplicate for m in again.sent)

    expected = [_expected(i, BIG) for i in range(count)]
    consumed = java_consume(url, topic, "java-sub", count + 1, timeout_ms=5000)
    assert _seen(consumed.messages) == expected
    assert consumed.timed_out

    # The official Python client (C++ core) reassembles the same chunks.
    client = pulsar.Client(url)
    try:
        consumer = client.subscribe(
            topic,
            "python-sub",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        received = []
        while True:
            try:
                message = consumer.receive(timeout_millis=5000)
            except pulsar.Timeout:
                break
            received.append((message.data(), message.producer_name()))
            consumer.acknowledge(message)
    finally:
        client.close()
    assert received == [(java_payload(i, BIG), "java-chunks") for i in range(count)]


def test_java_consumer_reads_what_the_python_producer_sent(
    java_client: Path, dedup_broker: BrokerProcess, topic: str
) -> None:
    client = pulsar.Client(dedup_broker.service_url)
    try:
        producer = client.create_producer(topic, producer_name="py-app")
        for i in range(50):
            producer.send_async(java_payload(i), None, partition_key=f"k{i % 3}")
        producer.flush()
        producer.close()
        chunked = client.create_producer(
            topic, producer_name="py-chunks", chunking_enabled=True, batching_enabled=False
        )
        for i in range(50, 52):
            chunked.send(java_payload(i, BIG), sequence_id=i)
    finally:
        client.close()
    consumed = java_consume(dedup_broker.service_url, topic, "java-sub", 53, timeout_ms=3000)
    assert _seen(consumed.messages) == [
        *(_expected(i, key=f"k{i % 3}") for i in range(50)),
        *(_expected(i, BIG) for i in range(50, 52)),
    ]
    assert [m.producer_name for m in consumed.messages] == ["py-app"] * 50 + ["py-chunks"] * 2
    assert consumed.timed_out


def test_java_chunked_resend_with_deduplication_enabled_on_the_namespace(
    java_client: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    broker = make_broker(kafka_bootstrap, tmp_path, max_message_size=MAX_MESSAGE_SIZE)
    broker.start()  # deduplication off by default: the namespace policy turns it on
    try:
        url, topic, count = broker.service_url, "persistent://public/default/java-ns", 3
        ns_url = f"{broker.http_url}/admin/v2/namespaces/public/default/deduplication"
        assert http_request("POST", ns_url, b"true")[0] == 204
        first = java_produce(
            url, topic, count, name="ns-app", chunking=True, size=BIG, resend=(0, 2)
        )
        assert not any(m.duplicate for m in first.sent)
        assert all(m.duplicate for m in first.resent)
        consumed = java_consume(url, topic, "java-sub", count + 1, timeout_ms=5000)
        assert _seen(consumed.messages) == [_expected(i, BIG) for i in range(count)]
        assert consumed.timed_out
    finally:
        broker.stop()
