"""Batch-index acknowledgement with the official client: a batch acknowledged in part is
redelivered with its ack set, so a consumer that never saw it gets only the messages left,
also after the broker restarted (the ack sets are stored with the cursor)."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pulsar
import pytest

from harness.broker_process import BrokerProcess

RECEIVE_MS = 10_000
BATCH = 10
STORED_S = 3.0
"""Long enough for a cursor to store its state (one write per second by default)."""


def publish_one_batch(service_url: str, topic: str) -> None:
    """Messages m0..m9, sent as one batch (one entry)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=BATCH,
            batching_max_publish_delay_ms=200,
        )
        for i in range(BATCH):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
    finally:
        client.close()


def subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "s",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
    )


def consume(
    service_url: str, topic: str, expected: Iterable[int], acknowledge: Iterable[int]
) -> None:
    """A new client and consumer receive exactly messages ``expected`` (by index, in
    order), all from one entry, and acknowledge those of ``acknowledge`` one by one."""
    wanted = list(expected)
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    try:
        consumer = subscribe(client, topic)
        received = [consumer.receive(RECEIVE_MS) for _ in wanted]
        assert [m.data() for m in received] == [f"m{i}".encode() for i in wanted]
        entries = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in received}
        assert len(entries) <= 1, "the messages should travel as one batch"
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1_000)
        by_index = dict(zip(wanted, received, strict=True))
        for i in acknowledge:
            consumer.acknowledge(by_index[i])
        consumer.close()  # flushes the acks; the rest goes back to the subscription
    finally:
        client.close()


def test_a_partly_acknowledged_batch_comes_back_without_the_acknowledged_messages(
    broker: BrokerProcess, topic: str
) -> None:
    publish_one_batch(broker.service_url, topic)
    consume(broker.service_url, topic, range(BATCH), acknowledge=[0, 2, 4, 6, 8])
    # A new client: only the broker can know what was acknowledged.
    rest = [1, 3, 5, 7, 9]
    consume(broker.service_url, topic, rest, acknowledge=rest)
    consume(broker.service_url, topic, [], acknowledge=[])


def test_batch_index_acks_survive_a_graceful_restart_and_a_kill(
    broker: BrokerProcess, topic: str
) -> None:
    publish_one_batch(broker.service_url, topic)
    consume(broker.service_url, topic, range(BATCH), acknowledge=[0, 2, 5])

    # SIGTERM: the broker stores every cursor's latest state before it exits.
    broker.restart(kill=False)
    consume(broker.service_url, topic, [1, 3, 4, 6, 7, 8, 9], acknowledge=[1])

    # kill -9 loses what was not stored yet: wait for the cursor's write first.
    time.sleep(STORED_S)
    broker.restart(kill=True)
    consume(broker.service_url, topic, [3, 4, 6, 7, 8, 9], acknowledge=[3, 4, 6, 7, 8, 9])
    consume(broker.service_url, topic, [], acknowledge=[])
