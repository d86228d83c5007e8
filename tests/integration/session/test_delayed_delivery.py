"""Delayed delivery with the official client: a message sent with ``deliver_after`` or
``deliver_at`` reaches Shared and Key_Shared consumers when due, does not hold back the
messages behind it, and survives a broker restart."""

from __future__ import annotations

import time
from datetime import timedelta

import pulsar
import pytest

from harness.broker_process import BrokerProcess

RECEIVE_MS = 15_000


@pytest.mark.parametrize(
    "consumer_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared]
)
def test_a_delayed_message_comes_when_due_and_blocks_nothing(
    client: pulsar.Client, topic: str, consumer_type: pulsar.ConsumerType
) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=consumer_type)
    producer = client.create_producer(topic, batching_enabled=False)
    sent_at = time.time()
    producer.send(b"later", partition_key="k", deliver_after=timedelta(seconds=3))
    for i in range(3):
        producer.send(f"now-{i}".encode(), partition_key="k")
    first = [consumer.receive(RECEIVE_MS) for _ in range(3)]
    assert [m.data() for m in first] == [b"now-0", b"now-1", b"now-2"]
    assert time.time() - sent_at < 3  # they did not wait for the delayed one
    for message in first:
        consumer.acknowledge(message)
    late = consumer.receive(RECEIVE_MS)
    assert late.data() == b"later"
    assert time.time() - sent_at >= 2.9
    consumer.acknowledge(late)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)


def test_delayed_messages_survive_a_broker_restart(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        due = int((time.time() + 6) * 1000)
        producer.send(b"at-due-time", deliver_at=due)
        producer.send(b"at-once")
        message = consumer.receive(RECEIVE_MS)
        assert message.data() == b"at-once"
        consumer.acknowledge(message)
        broker.restart(kill=True)
        # An acknowledgement not yet stored at the kill is redelivered (at least once):
        # before the delayed message, or after it when the restart outlasted its delay.
        received: list[tuple[bytes, float]] = []
        for _ in range(20):  # bounded: a message redelivered forever fails the test
            waiting = 1_000 if any(data == b"at-due-time" for data, _ in received) else RECEIVE_MS
            try:
                late = consumer.receive(waiting)
            except pulsar.Timeout:
                break
            received.append((late.data(), time.time() * 1000))
            consumer.acknowledge(late)
        else:
            pytest.fail(f"messages keep coming after the restart: {received}")
        assert {data for data, _ in received} <= {b"at-once", b"at-due-time"}
        delayed = [at for data, at in received if data == b"at-due-time"]
        assert len(delayed) == 1, received
        assert delayed[0] >= due - 100
    finally:
        client.close()
