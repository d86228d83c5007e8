"""Acknowledgements and reads across the boundary between two ledgers, with the official
client: a cumulative ack of a batch's first message names the entry before it, which for a
ledger's first entry is ``(L, -1)``; that must acknowledge nothing of ledger L."""

from __future__ import annotations

import json
import time
import urllib.request

import pulsar

from harness.broker_process import BrokerProcess

RECEIVE_MS = 10_000
PER_LEDGER = 1000


def _publish_batched(client: pulsar.Client, topic: str, first: int, count: int) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=PER_LEDGER
    )
    for i in range(first, first + count):
        producer.send_async(b"m-%d" % i, None)
    producer.flush()
    producer.close()


def _two_ledgers(broker: BrokerProcess, topic: str) -> None:
    """``PER_LEDGER`` batched messages in each of two ledgers (a restart between them)."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    _publish_batched(client, topic, 0, PER_LEDGER)
    client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    _publish_batched(client, topic, PER_LEDGER, PER_LEDGER)
    client.close()


def _mark_delete(broker: BrokerProcess, topic: str, subscription: str) -> str:
    path = topic.replace("persistent://", "")
    url = f"{broker.http_url}/admin/v2/persistent/{path}/internalStats"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(json.loads(response.read())["cursors"][subscription]["markDeletePosition"])


def _received(consumer: pulsar.Consumer, limit: int) -> list[int]:
    out = []
    while len(out) < limit:
        try:
            message = consumer.receive(RECEIVE_MS if not out else 2_000)
        except pulsar.Timeout:
            break
        out.append(int(message.data()[2:]))
        consumer.acknowledge(message)
    return out


def test_a_cumulative_ack_of_a_ledgers_first_message_keeps_the_rest_of_it(
    broker: BrokerProcess, topic: str
) -> None:
    _two_ledgers(broker, topic)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        first = consumer.receive(RECEIVE_MS)
        assert first.data() == b"m-0"
        consumer.acknowledge_cumulative(first)
        time.sleep(1.0)  # the client's ack grouping, then the broker's cursor
        assert _mark_delete(broker, topic, "sub").split(":")[1] != str(2**64 - 1)
        consumer.close()

        again = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        received = _received(again, 2 * PER_LEDGER)
        # The rest of the first batch comes again (only its first message was acknowledged).
        assert received == list(range(received[0], 2 * PER_LEDGER)) and received[0] <= 1
    finally:
        client.close()


def test_readers_from_earliest_read_both_ledgers_whole(broker: BrokerProcess, topic: str) -> None:
    _two_ledgers(broker, topic)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        for queue in (1, 10, 1000):
            reader = client.create_reader(
                topic, pulsar.MessageId.earliest, receiver_queue_size=queue
            )
            read = []
            while reader.has_message_available():
                read.append(int(reader.read_next(RECEIVE_MS).data()[2:]))
            reader.close()
            assert read == list(range(2 * PER_LEDGER)), f"receiver queue {queue}"
    finally:
        client.close()
