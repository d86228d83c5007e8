"""Subscription types, redelivery and redelivery counts."""

from __future__ import annotations

import pulsar
import pytest

RECEIVE_MS = 10_000


def test_shared_subscription_spreads_messages(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(
        topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
    )
    second = client.subscribe(
        topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
    )
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(100):
        producer.send(f"{i}".encode())
    seen: dict[str, list[int]] = {"first": [], "second": []}
    while len(seen["first"]) + len(seen["second"]) < 100:
        progressed = False
        for name, consumer in (("first", first), ("second", second)):
            try:
                msg = consumer.receive(200)
            except pulsar.Timeout:
                continue
            seen[name].append(int(msg.data()))
            consumer.acknowledge(msg)
            progressed = True
        if not progressed:
            break
    assert sorted(seen["first"] + seen["second"]) == list(range(100))
    assert seen["first"] and seen["second"]


def test_exclusive_refuses_a_second_consumer(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)


def test_negative_ack_redelivers_with_growing_count(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "nack",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic)
    producer.send(b"again")
    counts = []
    for _ in range(3):
        msg = consumer.receive(RECEIVE_MS)
        assert msg.data() == b"again"
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    msg = consumer.receive(RECEIVE_MS)
    counts.append(msg.redelivery_count())
    consumer.acknowledge(msg)
    assert counts == [0, 1, 2, 3]


def test_ack_timeout_redelivers(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "timeout",
        consumer_type=pulsar.ConsumerType.Shared,
        unacked_messages_timeout_ms=10_500,
    )
    producer = client.create_producer(topic)
    producer.send(b"late")
    first = consumer.receive(RECEIVE_MS)
    assert first.redelivery_count() == 0
    second = consumer.receive(30_000)
    assert second.data() == b"late"
    assert second.redelivery_count() == 1
    consumer.acknowledge(second)


def test_exclusive_negative_ack_redelivers(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "order", negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"{i}".encode())
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == b"0"
    consumer.negative_acknowledge(msg)
    counts: dict[bytes, list[int]] = {}
    while not (set(counts) == {b"0", b"1", b"2"} and counts[b"0"]):
        m = consumer.receive(RECEIVE_MS)
        counts.setdefault(m.data(), []).append(m.redelivery_count())
        consumer.acknowledge(m)
    assert 1 in counts[b"0"]


def test_unsubscribe_removes_the_subscription(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    producer.send(b"1")
    consumer.unsubscribe()
    again = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"2")
    assert again.receive(RECEIVE_MS).data() == b"2"
