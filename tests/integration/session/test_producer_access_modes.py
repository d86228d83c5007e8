"""Producer access modes with the official client: Shared, Exclusive, ExclusiveWithFencing
and WaitForExclusive, with Pulsar's errors (ProducerBusy, ProducerFenced)."""

from __future__ import annotations

import threading
import time

import pulsar
import pytest

from harness.broker_process import BrokerProcess

Mode = pulsar.ProducerAccessMode


def _stored(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        reader.close()


def test_exclusive_producer_keeps_others_out(client: pulsar.Client, topic: str) -> None:
    exclusive = client.create_producer(topic, producer_name="owner", access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="shared-one")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="second", access_mode=Mode.Exclusive)
    exclusive.send(b"from-owner")
    exclusive.close()

    # Once it is gone the topic is free again, for a Shared producer too.
    shared = client.create_producer(topic, producer_name="shared-one")
    shared.send(b"from-shared")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="third", access_mode=Mode.Exclusive)
    shared.close()
    assert _stored(client, topic) == [b"from-owner", b"from-shared"]


def test_exclusive_with_fencing_takes_over(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(
        topic, producer_name="old", access_mode=Mode.Exclusive, send_timeout_millis=3000
    )
    first.send(b"old-1")
    second = client.create_producer(
        topic, producer_name="new", access_mode=Mode.ExclusiveWithFencing
    )
    second.send(b"new-1")
    # The fenced producer comes back with its old topic epoch: refused for good.
    with pytest.raises(pulsar.ProducerFenced):
        for _ in range(50):
            first.send(b"old-2")
            time.sleep(0.1)
    second.send(b"new-2")
    assert _stored(client, topic) == [b"old-1", b"new-1", b"new-2"]


def test_wait_for_exclusive_queues_until_the_topic_is_free(
    client: pulsar.Client, topic: str
) -> None:
    holder = client.create_producer(topic, producer_name="holder", access_mode=Mode.Exclusive)
    holder.send(b"holder-1")
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: created.append(
            client.create_producer(topic, producer_name="waiter", access_mode=Mode.WaitForExclusive)
        )
    )
    waiter.start()
    time.sleep(1.5)
    assert not created, "the waiting producer must not be ready while the holder is there"
    # Meanwhile a Shared producer is refused: an exclusive producer holds the topic.
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="shared")
    holder.send(b"holder-2")
    holder.close()
    waiter.join(timeout=20)
    assert created, "the waiting producer never got the topic"
    created[0].send(b"waiter-1")
    created[0].close()
    assert _stored(client, topic) == [b"holder-1", b"holder-2", b"waiter-1"]


def test_wait_for_exclusive_on_a_free_topic_is_ready_at_once(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, access_mode=Mode.WaitForExclusive)
    producer.send(b"m")
    assert _stored(client, topic) == [b"m"]


def test_topic_epoch_survives_a_broker_restart(
    broker: BrokerProcess, client: pulsar.Client, topic: str
) -> None:
    """A producer fenced before a restart stays fenced after it: the epoch is stored."""
    first = client.create_producer(topic, producer_name="a", access_mode=Mode.Exclusive)
    first.send(b"a-1")
    second = client.create_producer(topic, producer_name="b", access_mode=Mode.ExclusiveWithFencing)
    second.send(b"b-1")
    broker.restart(kill=False)
    second.send(b"b-2")  # reconnects with its epoch, which is the topic's
    with pytest.raises(pulsar.ProducerFenced):
        for _ in range(50):
            first.send(b"a-2")
            time.sleep(0.1)
    assert _stored(client, topic) == [b"a-1", b"b-1", b"b-2"]
