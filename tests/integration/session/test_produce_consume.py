"""Publish and consume through the broker with the official Pulsar client."""

from __future__ import annotations

import pulsar

RECEIVE_MS = 10_000


def test_properties_keys_and_event_time_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = []
    for i in range(20):
        message_id = producer.send(
            f"m-{i}".encode(),
            properties={"i": str(i), "kind": "test"},
            partition_key=f"key-{i % 3}",
            event_timestamp=1_700_000_000_000 + i,
        )
        sent.append(message_id)
    received = []
    for _ in range(20):
        msg = consumer.receive(RECEIVE_MS)
        received.append((msg.data(), msg.properties(), msg.partition_key(), msg.event_timestamp()))
        consumer.acknowledge(msg)
    assert received == [
        (f"m-{i}".encode(), {"i": str(i), "kind": "test"}, f"key-{i % 3}", 1_700_000_000_000 + i)
        for i in range(20)
    ]
    assert [m.entry_id() for m in sent] == list(range(20))


def test_batched_messages_arrive_in_order(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, batching_max_publish_delay_ms=5
    )
    for i in range(1000):
        producer.send_async(f"b-{i}".encode(), None, properties={"n": str(i)})
    producer.flush()
    payloads = []
    for _ in range(1000):
        msg = consumer.receive(RECEIVE_MS)
        payloads.append((msg.data(), msg.properties()["n"]))
        consumer.acknowledge(msg)
    assert payloads == [(f"b-{i}".encode(), str(i)) for i in range(1000)]


def test_one_mebibyte_messages(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    bodies = [bytes([i]) * (1024 * 1024) for i in range(5)]
    for body in bodies:
        producer.send(body)
    for body in bodies:
        msg = consumer.receive(RECEIVE_MS)
        assert msg.data() == body
        consumer.acknowledge(msg)


def test_hundred_thousand_messages_in_order(client: pulsar.Client, topic: str) -> None:
    total = 100_000
    consumer = client.subscribe(
        topic, "sub", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=5000
    )
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=500,
        max_pending_messages=20000,
        block_if_queue_full=True,
    )
    for i in range(total):
        producer.send_async(i.to_bytes(4, "big"), None)
    producer.flush()
    expected = 0
    last = None
    while expected < total:
        msg = consumer.receive(RECEIVE_MS)
        assert int.from_bytes(msg.data(), "big") == expected
        expected += 1
        last = msg
        if expected % 1000 == 0:
            consumer.acknowledge_cumulative(msg)
    assert last is not None
    consumer.acknowledge_cumulative(last)
    assert expected == total
