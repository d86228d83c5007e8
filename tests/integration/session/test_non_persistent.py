"""Non-persistent topics through the official client on a real broker and Kafka: live
delivery only, per subscription; nothing reaches Kafka; a restart starts them empty."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from typing import Any

import pulsar
from confluent_kafka.admin import AdminClient

from harness.broker_process import BrokerProcess

RECEIVE_MS = 5_000


def np_topic() -> str:
    return f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"


def admin_get(broker: BrokerProcess, path: str) -> Any:
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return json.loads(response.read())


def stats(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    local = topic.removeprefix("non-persistent://")
    result: dict[str, Any] = admin_get(broker, f"/admin/v2/non-persistent/{local}/stats")
    return result


def wait_ready(broker: BrokerProcess, topic: str, consumers: int) -> None:
    """Until ``consumers`` consumers have sent their permits (their FLOW)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        subscriptions = stats(broker, topic)["subscriptions"].values()
        ready = [c for s in subscriptions for c in s["consumers"] if c["availablePermits"] > 0]
        if len(ready) >= consumers:
            return
        time.sleep(0.05)
    raise AssertionError(f"{consumers} consumers not ready on {topic}")


def drain(consumer: pulsar.Consumer, timeout_ms: int = 300) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(consumer.receive(timeout_ms).data())
        except pulsar.Timeout:
            return out


def ledger_topics(kafka_bootstrap: str, cluster: str) -> set[str]:
    listing = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    return {name for name in listing.topics if name.startswith(f"{cluster}.ledger.")}


def test_live_messages_reach_each_subscription_and_nothing_is_stored(
    broker: BrokerProcess, client: pulsar.Client, kafka_bootstrap: str
) -> None:
    topic = np_topic()
    before = ledger_topics(kafka_bootstrap, broker.cluster_name)
    producer = client.create_producer(topic, batching_enabled=False)
    receipt = producer.send(b"nobody-listens")
    assert (receipt.ledger_id(), receipt.entry_id()) == (0, 0)

    first = client.subscribe(topic, "one", consumer_type=pulsar.ConsumerType.Exclusive)
    second = client.subscribe(topic, "two", consumer_type=pulsar.ConsumerType.Exclusive)
    wait_ready(broker, topic, 2)
    sent = [f"m-{i}".encode() for i in range(10)]
    for payload in sent:
        producer.send(payload)
    assert [first.receive(RECEIVE_MS).data() for _ in sent] == sent
    assert [second.receive(RECEIVE_MS).data() for _ in sent] == sent
    assert drain(first) == [] and drain(second) == []

    topic_stats = stats(broker, topic)
    assert topic_stats["msgInCounter"] == 11
    assert topic_stats["msgDropCounter"] == 1
    assert topic_stats["msgOutCounter"] == 20
    assert sorted(topic_stats["subscriptions"]) == ["one", "two"]
    assert [p["msgInCounter"] for p in topic_stats["publishers"]] == [11]
    assert admin_get(broker, "/admin/v2/non-persistent/public/default") == [topic]
    assert admin_get(broker, "/admin/v2/persistent/public/default") == []
    assert ledger_topics(kafka_bootstrap, broker.cluster_name) == before


def test_shared_consumers_split_the_messages(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = np_topic()
    consumers = [
        client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100
        )
        for _ in range(2)
    ]
    wait_ready(broker, topic, 2)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"{i}".encode())
    received = [[int(data) for data in drain(consumer, 1000)] for consumer in consumers]
    assert sorted(received[0] + received[1]) == list(range(40))
    assert len(received[0]) == len(received[1]) == 20
    assert all(part == sorted(part) for part in received)


def test_a_restarted_broker_starts_without_them(
    broker: BrokerProcess, client: pulsar.Client
) -> None:
    topic = np_topic()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    assert admin_get(broker, "/admin/v2/non-persistent/public/default") == [topic]
    producer.close()
    broker.restart(kill=False)
    assert admin_get(broker, "/admin/v2/non-persistent/public/default") == []
    consumer = client.subscribe(topic, "after-restart")
    wait_ready(broker, topic, 1)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"after")
    assert drain(consumer, 2000) == [b"after"]
