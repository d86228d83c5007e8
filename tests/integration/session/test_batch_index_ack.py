"""Batch-index acknowledgement with the official client: a batch acknowledged in part is
redelivered with its ack set, so a consumer that never saw it gets only the messages left."""

from __future__ import annotations

import pulsar
import pytest

from dedup_broker.testing.broker_process import BrokerProcess

RECEIVE_MS = 10_000


def test_a_partly_acknowledged_batch_comes_back_without_the_acknowledged_messages(
    broker: BrokerProcess, topic: str
) -> None:
    first = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = first.subscribe(
            topic, "s", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        producer = first.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=200,
        )
        for i in range(10):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        received = [consumer.receive(RECEIVE_MS) for _ in range(10)]
        assert [m.data() for m in received] == [f"m{i}".encode() for i in range(10)]
        entries = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in received}
        assert len(entries) == 1, "the ten messages should travel as one batch"
        for message in received[::2]:  # m0, m2, m4, m6, m8
            consumer.acknowledge(message)
        consumer.close()  # flushes the acks; the rest goes back to the subscription
    finally:
        first.close()
    # A new client: only the broker can know what was acknowledged.
    second = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = second.subscribe(
            topic, "s", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        again = [consumer.receive(RECEIVE_MS) for _ in range(5)]
        assert [m.data() for m in again] == [f"m{i}".encode() for i in range(1, 10, 2)]
        for message in again:
            consumer.acknowledge(message)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1_000)
    finally:
        second.close()
