"""Topic compaction with the official client: the latest message per key, then the tail."""

from __future__ import annotations

import time

import pulsar
import requests
from confluent_kafka.admin import AdminClient

from dedup_broker.app.deletion_worker import run_doctor
from dedup_broker.config import BrokerConfig
from dedup_broker.storage.tables.compacted_store import compacted_topic_prefix
from harness.broker_process import BrokerProcess

RECEIVE_MS = 10_000


def _compaction_url(broker: BrokerProcess, topic: str) -> str:
    path = topic.replace("persistent://", "")
    return f"{broker.http_url}/admin/v2/persistent/{path}/compaction"


def _compact(broker: BrokerProcess, topic: str) -> None:
    response = requests.put(_compaction_url(broker, topic), timeout=10)
    assert response.status_code == 204, response.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = requests.get(_compaction_url(broker, topic), timeout=10).json()
        if status["status"] != "RUNNING":
            assert status == {"status": "SUCCESS", "lastError": ""}
            return
        time.sleep(0.1)
    raise AssertionError("compaction did not finish")


def _read_all(reader: pulsar.Reader) -> list[tuple[str, bytes]]:
    out = []
    while reader.has_message_available():
        message = reader.read_next(RECEIVE_MS)
        out.append((message.partition_key(), message.data()))
    return out


def _publish(client: pulsar.Client, topic: str, batching: bool) -> None:
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=50
    )
    sent = [
        ("a", b"a1"),
        ("b", b"b1"),
        ("c", b"c1"),
        ("a", b"a2"),
        ("d", b"d1"),
        ("b", b""),  # an empty payload removes its key
        ("c", b"c2"),
    ]
    for key, value in sent:
        producer.send_async(value, None, partition_key=key)
    producer.send(b"no key")  # messages without a key are left out
    producer.flush()
    producer.close()


def test_readers_see_the_latest_per_key_then_the_tail(
    broker: BrokerProcess, client: pulsar.Client, topic: str
) -> None:
    for batching in (False, True):
        name = f"{topic}-{'batched' if batching else 'single'}"
        _publish(client, name, batching)
        _compact(broker, name)
        after = client.create_producer(name, batching_enabled=False)
        after.send(b"a3", partition_key="a")
        after.send(b"a4", partition_key="a")

        compacted = client.create_reader(name, pulsar.MessageId.earliest, is_read_compacted=True)
        assert _read_all(compacted) == [
            ("a", b"a2"),
            ("d", b"d1"),
            ("c", b"c2"),
            ("a", b"a3"),
            ("a", b"a4"),
        ], f"batching={batching}"
        plain = client.create_reader(name, pulsar.MessageId.earliest)
        assert len(_read_all(plain)) == 10


def test_compacted_subscription_survives_a_restart(
    broker: BrokerProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for round_ in range(3):
        for key in ("x", "y"):
            producer.send(f"{key}{round_}".encode(), partition_key=key)
    producer.close()
    _compact(broker, topic)
    broker.restart(kill=True)

    again = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = again.subscribe(
            topic,
            "compacted",
            initial_position=pulsar.InitialPosition.Earliest,
            is_read_compacted=True,
        )
        got = [consumer.receive(RECEIVE_MS) for _ in range(2)]
        assert [(m.partition_key(), m.data()) for m in got] == [("x", b"x2"), ("y", b"y2")]
        for message in got:
            consumer.acknowledge(message)
        producer = again.create_producer(topic)
        producer.send(b"x3", partition_key="x")
        message = consumer.receive(RECEIVE_MS)
        assert (message.partition_key(), message.data()) == ("x", b"x3")
        shared = again.subscribe  # read_compacted is refused on Shared subscriptions
        try:
            shared(
                topic,
                "shared",
                consumer_type=pulsar.ConsumerType.Shared,
                is_read_compacted=True,
            )
        except pulsar.PulsarException:
            pass
        else:
            raise AssertionError("read_compacted on a Shared subscription was accepted")
    finally:
        again.close()


def test_compaction_status_and_missing_topic(broker: BrokerProcess, topic: str) -> None:
    assert requests.get(_compaction_url(broker, topic), timeout=10).status_code == 404
    client = pulsar.Client(broker.service_url)
    try:
        client.create_producer(topic).close()
    finally:
        client.close()
    status = requests.get(_compaction_url(broker, topic), timeout=10).json()
    assert status == {"status": "NOT_RUN", "lastError": ""}


def test_the_companion_topic_goes_with_its_topic(
    broker: BrokerProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    producer.send(b"v", partition_key="k")
    producer.close()
    _compact(broker, topic)
    config = BrokerConfig(
        kafka_bootstrap_servers=broker.kafka_bootstrap, cluster_name=broker.cluster_name
    )
    prefix = compacted_topic_prefix(broker.cluster_name)
    admin = AdminClient(config.kafka_connection())
    assert [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]

    path = topic.replace("persistent://", "")
    deleted = requests.delete(
        f"{broker.http_url}/admin/v2/persistent/{path}?force=true", timeout=30
    )
    assert deleted.status_code == 204, deleted.text
    deadline = time.monotonic() + 30
    while [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]:
        assert time.monotonic() < deadline, "the companion topic was not deleted"
        time.sleep(0.5)
    assert run_doctor(config)["compactedOrphans"] == []
