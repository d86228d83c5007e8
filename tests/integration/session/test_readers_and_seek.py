"""Readers, seek and last-message-id with the official client."""

from __future__ import annotations

import time

import pulsar
import pytest

RECEIVE_MS = 10_000


def _publish(
    client: pulsar.Client, topic: str, count: int, batching: bool = False
) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=batching)
    ids = [producer.send(f"r-{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def _read_all(reader: pulsar.Reader, limit: int = 1000) -> list[bytes]:
    out = []
    while reader.has_message_available() and len(out) < limit:
        out.append(reader.read_next(RECEIVE_MS).data())
    return out


def test_reader_from_earliest_and_latest(client: pulsar.Client, topic: str) -> None:
    _publish(client, topic, 10)
    earliest = client.create_reader(topic, pulsar.MessageId.earliest)
    assert _read_all(earliest) == [f"r-{i}".encode() for i in range(10)]
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    producer = client.create_producer(topic)
    producer.send(b"after")
    assert latest.read_next(RECEIVE_MS).data() == b"after"


def test_reader_from_a_message_id_exclusive_and_inclusive(
    client: pulsar.Client, topic: str
) -> None:
    ids = _publish(client, topic, 10)
    exclusive = client.create_reader(topic, ids[4])
    assert _read_all(exclusive) == [f"r-{i}".encode() for i in range(5, 10)]
    inclusive = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert _read_all(inclusive) == [f"r-{i}".encode() for i in range(4, 10)]


def test_has_message_available_on_empty_topic(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).close()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()


def test_seek_by_message_id_and_by_time(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "seek", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(10):
        ids.append(producer.send(f"s-{i}".encode()))
        if i == 5:
            time.sleep(0.05)
            middle = int(time.time() * 1000)
            time.sleep(0.05)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
    consumer.seek(ids[2])
    # The official client treats the seek id as exclusive (its default).
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(7)] == [
        f"s-{i}".encode() for i in range(3, 10)
    ]
    consumer.seek(middle)
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(4)] == [
        f"s-{i}".encode() for i in range(6, 10)
    ]


def test_get_last_message_id(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "last", initial_position=pulsar.InitialPosition.Earliest)
    ids = _publish(client, topic, 3)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


@pytest.mark.parametrize("inclusive", [False, True])
def test_reader_in_batched_topic(client: pulsar.Client, topic: str, inclusive: bool) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
    )
    for i in range(30):
        producer.send_async(f"x-{i}".encode(), None)
    producer.flush()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert _read_all(reader) == [f"x-{i}".encode() for i in range(30)]


def test_a_reader_at_latest_seeks_back(client: pulsar.Client, topic: str) -> None:
    """To the earliest message, to a message id (exclusive, the client's default) and to a
    publish time: each reads from there on."""
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(8):
        ids.append(producer.send(f"t-{i}".encode()))
        if i == 4:
            time.sleep(0.05)
            middle = int(time.time() * 1000)
            time.sleep(0.05)
    expected = [f"t-{i}".encode() for i in range(8)]

    reader = client.create_reader(topic, pulsar.MessageId.latest)
    reader.seek(pulsar.MessageId.earliest)
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(8)] == expected

    reader = client.create_reader(topic, pulsar.MessageId.latest)
    reader.seek(ids[2])
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(5)] == expected[3:]

    reader = client.create_reader(topic, pulsar.MessageId.latest)
    reader.seek(middle)
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(3)] == expected[5:]
    with pytest.raises(pulsar.Timeout):
        reader.read_next(500)
