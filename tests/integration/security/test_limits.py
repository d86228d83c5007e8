"""Limits that keep one client from exhausting the broker: topics per namespace, producers
and consumers per topic and subscription, connections per IP; auto-created partitioned
topics. Each refusal reaches the official client as Pulsar's error."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pulsar
import pytest
import requests

from harness.admin_http import create_namespace
from harness.broker_process import BrokerProcess
from tests.integration.conftest import make_broker, serve


@pytest.fixture(scope="module")
def limited(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap,
        tmp_path_factory.mktemp("limited"),
        max_topics_per_namespace=4,
        max_producers_per_topic=2,
        max_consumers_per_topic=3,
        max_consumers_per_subscription=2,
    )


@pytest.fixture()
def client(limited: BrokerProcess) -> Iterator[pulsar.Client]:
    client = pulsar.Client(limited.service_url, operation_timeout_seconds=10)
    try:
        yield client
    finally:
        client.close()


def test_topics_per_namespace(limited: BrokerProcess, client: pulsar.Client) -> None:
    namespace = f"limits-{uuid.uuid4().hex[:6]}"
    create_namespace(limited.http_url, f"public/{namespace}", limited.cluster_name)
    topics = [f"persistent://public/{namespace}/t{i}" for i in range(5)]
    for topic in topics[:4]:
        client.create_producer(topic).send(b"x")
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(topics[4])
    # A partitioned topic counts each partition: two more do not fit either.
    response = requests.put(
        f"{limited.http_url}/admin/v2/persistent/public/{namespace}/p/partitions",
        json=2,
        timeout=10,
    )
    assert response.status_code == 412
    assert "Exceed maximum number of topics" in response.json()["reason"]
    # The topics that exist keep working.
    client.create_producer(topics[0]).send(b"y")


def test_producers_per_topic(client: pulsar.Client) -> None:
    topic = f"persistent://public/default/producers-{uuid.uuid4().hex[:6]}"
    first = client.create_producer(topic)
    client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    client.create_producer(topic).send(b"room again")


def test_consumers_per_subscription_and_topic(client: pulsar.Client) -> None:
    topic = f"persistent://public/default/consumers-{uuid.uuid4().hex[:6]}"
    shared = pulsar.ConsumerType.Shared
    first = client.subscribe(topic, "a", consumer_type=shared)
    client.subscribe(topic, "a", consumer_type=shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "a", consumer_type=shared)
    client.subscribe(topic, "b", consumer_type=shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "c", consumer_type=shared)  # 3 on the topic already
    first.close()
    client.subscribe(topic, "c", consumer_type=shared)


def test_connections_per_ip_and_partitioned_auto_creation(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path_factory.mktemp("connections"),
        max_connections_per_ip=2,
        allow_auto_topic_creation_type="partitioned",
        default_num_partitions=3,
    )
    broker.start()
    clients = [pulsar.Client(broker.service_url, operation_timeout_seconds=3) for _ in range(3)]
    try:
        topic = f"persistent://public/default/auto-{uuid.uuid4().hex[:6]}"
        consumer = clients[0].subscribe(topic, "s")
        producer = clients[1].create_producer(topic)
        sent = [f"m{i}".encode() for i in range(12)]
        for payload in sent:
            producer.send(payload)
        received = sorted(consumer.receive(timeout_millis=10_000).data() for _ in sent)
        assert received == sorted(sent)
        partitions = requests.get(
            f"{broker.http_url}/admin/v2/persistent/{topic.split('://')[1]}/partitions", timeout=10
        ).json()
        assert partitions["partitions"] == 3
        with pytest.raises((pulsar.NotAllowedError, pulsar.ConnectError, pulsar.Timeout)):
            clients[2].create_producer(topic)
        assert "maxConnectionsPerIp=2" in broker.log_text()
        clients.pop(1).close()
        deadline = time.monotonic() + 15
        while True:  # the broker sees the closed connection shortly
            try:
                clients[1].create_producer(topic).send(b"after")
                break
            except (pulsar.NotAllowedError, pulsar.ConnectError, pulsar.Timeout):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert consumer.receive(timeout_millis=10_000).data() == b"after"
    finally:
        for client in clients:
            client.close()
        broker.stop()
