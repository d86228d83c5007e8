"""Failover subscriptions through the official clients: which consumer is active (the
partitions of a topic spread over the consumers of the best priority level, with the
Java client's ``priorityLevel``), and the hand-over when another consumer takes over: for
``activeConsumerFailoverDelayTimeMillis`` (1 s) nothing is sent, so that the consumer
active before acknowledges what it received, then the new one gets what is left."""

from __future__ import annotations

import json
import time
import uuid

import pulsar
import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.pulsar_java import ensure_java_client, java_failover_shares

TOPIC = "persistent://public/default/failover-handover"
"""Each test has a broker (and Kafka topics) of its own. On Pulsar's hash ring of this
name, ``second`` wins over ``first``: a second consumer takes over."""
RECEIVE_MS = 10_000


def send(client: pulsar.Client, first: int, count: int) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(first, first + count):
        producer.send(f"m{i}".encode())
    producer.close()


def failover(client: pulsar.Client, name: str) -> pulsar.Consumer:
    return client.subscribe(
        TOPIC,
        "app",
        consumer_type=pulsar.ConsumerType.Failover,
        consumer_name=name,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def receive(consumer: pulsar.Consumer, count: int, ack: bool = True) -> list[str]:
    got = []
    for _ in range(count):
        message = consumer.receive(RECEIVE_MS)
        got.append(message.data().decode())
        if ack:
            consumer.acknowledge(message)
    return got


def nothing_comes(consumer: pulsar.Consumer, ms: int) -> bool:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(ms)
    return True


def active_consumer(broker: BrokerProcess) -> str:
    path = f"{broker.http_url}/admin/v2/persistent/public/default/failover-handover/stats"
    status, body = http_request("GET", path)
    assert status == 200, body
    return str(json.loads(body)["subscriptions"]["app"]["activeConsumerName"])


def test_a_stream_being_received_is_not_split_when_another_consumer_takes_over(
    broker: BrokerProcess, client: pulsar.Client
) -> None:
    """100 messages stream to ``first``; after 30, ``second`` joins and is the active
    one. ``first`` goes on with the 70 it had received and acknowledges them within the
    delay, so ``second`` gets none of them, only what is published afterwards."""
    send(client, 0, 100)
    first = failover(client, "first")
    assert receive(first, 30) == [f"m{i}" for i in range(30)]
    second = failover(client, "second")
    joined = time.monotonic()
    assert active_consumer(broker) == "second"
    assert receive(first, 70) == [f"m{i}" for i in range(30, 100)]
    assert time.monotonic() - joined < 1.0  # all of it within the delay
    assert nothing_comes(second, 2_500)
    send(client, 100, 20)
    assert receive(second, 20) == [f"m{i}" for i in range(100, 120)]
    assert nothing_comes(first, 500)


def test_what_the_consumer_active_before_left_unacknowledged_goes_to_the_new_one(
    broker: BrokerProcess, client: pulsar.Client
) -> None:
    """``first`` stops acknowledging after 30 of 100; once the delay passed, ``second``
    gets the 70 others, in order, and then what is published."""
    send(client, 0, 100)
    first = failover(client, "first")
    assert receive(first, 30) == [f"m{i}" for i in range(30)]
    second = failover(client, "second")
    joined = time.monotonic()
    message = second.receive(RECEIVE_MS)
    assert time.monotonic() - joined >= 0.9  # not before the delay
    second.acknowledge(message)
    assert [message.data().decode(), *receive(second, 69)] == [f"m{i}" for i in range(30, 100)]
    send(client, 100, 5)
    assert receive(second, 5) == [f"m{i}" for i in range(100, 105)]


def test_partitions_spread_over_the_consumers_of_the_best_priority_level(
    broker: BrokerProcess,
) -> None:
    """12 partitions; Java consumers ``c0`` .. ``c5`` of levels 1, 0, 0, 1, 0, 0: each
    level-0 consumer is active for (and receives) 3 partitions, in turn by name, the
    level-1 ones none; once the level-0 ones left, the level-1 ones share all 12."""
    ensure_java_client()
    name = f"spread-{uuid.uuid4().hex[:8]}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, b"12")[0] == 204
    shares = java_failover_shares(
        broker.service_url, f"persistent://public/default/{name}", "app", 24, (1, 0, 0, 1, 0, 0)
    )
    first = {s.consumer: s for s in shares if s.round == 1}
    expected = {1: (0, 4, 8), 2: (1, 5, 9), 4: (2, 6, 10), 5: (3, 7, 11), 0: (), 3: ()}
    assert {n: s.active for n, s in first.items()} == expected
    assert {n: s.received for n, s in first.items()} == expected
    second = {s.consumer: s for s in shares if s.round == 2}
    expected = {0: (0, 2, 4, 6, 8, 10), 3: (1, 3, 5, 7, 9, 11)}
    assert {n: s.active for n, s in second.items()} == expected
    assert {n: s.received for n, s in second.items()} == expected
