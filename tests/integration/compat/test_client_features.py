"""Client features as Pulsar serves them, through the official Python and Java clients:
Shared priority levels, dead-letter topics' initial subscription, Key_Shared's classic
range split, the BYTES schema, and Avro evolutions Pulsar accepts."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema, BytesSchema, Integer, JsonSchema, Record, String

from dedup_broker.domain.key_hash import key_hash
from harness.broker_process import BrokerProcess
from harness.pulsar_java import ensure_java_client, java_priority_shares
from tests.integration.conftest import serve


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path_factory.mktemp("features"))


@pytest.fixture(scope="module")
def classic(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap,
        tmp_path_factory.mktemp("classic"),
        subscription_key_shared_use_consistent_hashing=False,
    )


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def client_of(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.service_url, operation_timeout_seconds=10)


def test_shared_consumers_of_the_best_priority_level_come_first(served: BrokerProcess) -> None:
    """Java consumers with ``priorityLevel``: the level-0 consumer fills its receiver queue
    (10) before the level-1 consumer, subscribed first, gets anything."""
    ensure_java_client()
    shares = java_priority_shares(
        served.service_url, new_topic("priority"), "s", 15, (1, 0), queue=10
    )
    assert shares == {0: 10, 1: 5}


def test_a_dead_letter_topic_gets_its_initial_subscription(served: BrokerProcess) -> None:
    """The dead-letter producer names ``initial_subscription_name``: that subscription
    exists before the first dead letter, so a consumer attaching later (at the latest
    position) still reads every one."""
    topic = new_topic("orders")
    dlq = f"{topic}-DLQ"
    client = client_of(served)
    try:
        consumer = client.subscribe(
            topic,
            "work",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(1, dlq, "init-sub"),
        )
        producer = client.create_producer(topic)
        sent = [f"order-{i}".encode() for i in range(3)]
        for payload in sent:
            producer.send(payload)
        # The first delivery and one redelivery each, then each goes to the dead letters.
        for _ in range(2 * len(sent)):
            consumer.negative_acknowledge(consumer.receive(timeout_millis=30_000))
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=2000)
        late = client.subscribe(dlq, "init-sub")
        letters = sorted(late.receive(timeout_millis=10_000).data() for _ in sent)
        assert letters == sent
    finally:
        client.close()


def test_key_shared_classic_range_split(classic: BrokerProcess) -> None:
    """``subscriptionKeySharedUseConsistentHashing=false``: the first consumer keeps the
    upper half of the hash range, the second takes the lower half."""
    topic = new_topic("classic")
    client = client_of(classic)
    try:
        first = client.subscribe(topic, "k", consumer_type=pulsar.ConsumerType.KeyShared)
        second = client.subscribe(topic, "k", consumer_type=pulsar.ConsumerType.KeyShared)
        producer = client.create_producer(topic, batching_enabled=False)
        keys = [f"key-{i}" for i in range(40)]
        for key in keys:
            producer.send(key.encode(), partition_key=key)
        received: dict[str, str] = {}
        for name, consumer in (("first", first), ("second", second)):
            while True:
                try:
                    message = consumer.receive(timeout_millis=2000)
                except pulsar.Timeout:
                    break
                received[message.partition_key()] = name
                consumer.acknowledge(message)
        expected = {key: "second" if key_hash(key.encode()) <= 32768 else "first" for key in keys}
        assert received == expected
        assert set(expected.values()) == {"first", "second"}
        url = f"{classic.http_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats"
        with urllib.request.urlopen(url, timeout=10) as response:
            stats = json.loads(response.read())
        ranges = sorted(c["keyHashRanges"] for c in stats["subscriptions"]["k"]["consumers"])
        assert ranges == [["[0, 32768]"], ["[32769, 65535]"]]
    finally:
        client.close()


def test_bytes_producers_and_consumers(served: BrokerProcess) -> None:
    """The official client's BYTES case: a BYTES producer (no schema on the wire), a JSON
    producer registering the topic's schema meanwhile (Pulsar accepts it), then a BYTES
    consumer reads what the BYTES producer sent, schemaless."""

    class Example(Record):
        a = Integer()
        b = Integer()

    topic = new_topic("bytes")
    client = client_of(served)
    try:
        producer = client.create_producer(topic, schema=BytesSchema())
        client.create_producer(topic, schema=JsonSchema(Example))
        consumer = client.subscribe(topic, "s", schema=BytesSchema())
        producer.send(b"Hello")
        message = consumer.receive(timeout_millis=10_000)
        assert message.value() == b"Hello"
    finally:
        client.close()


def test_avro_evolutions_pulsar_accepts(served: BrokerProcess) -> None:
    """A record class evolved under another name with a field made required (``FORWARD``,
    read by consumers and readers of the old class), and defaults added to every field
    (the default strategy)."""

    class User1(Record):
        name = String()
        age = Integer()

    class User2(Record):
        _sorted_fields = True
        name = String()
        age = Integer(required=True)

    class Plain(Record):
        a = Integer()
        b = String(required=True)

    class WithDefaults(Record):
        _sorted_fields = True
        a = Integer(required_default=True)
        b = String(required=True, required_default=True, default="")

    client = client_of(served)
    try:
        topic = new_topic("defaults")
        client.create_producer(topic, schema=AvroSchema(Plain))
        client.create_producer(topic, schema=AvroSchema(WithDefaults))
        namespace = f"{served.http_url}/admin/v2/namespaces/public/evolve"
        put = urllib.request.Request(namespace, method="PUT")
        urllib.request.urlopen(put, timeout=10).close()
        strategy = urllib.request.Request(
            namespace + "/schemaCompatibilityStrategy",
            data=b'"FORWARD"',
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        urllib.request.urlopen(strategy, timeout=10).close()
        topic = f"persistent://public/evolve/users-{uuid.uuid4().hex[:6]}"
        producer1 = client.create_producer(topic, schema=AvroSchema(User1))
        consumer = client.subscribe(topic, "sub", schema=AvroSchema(User1))
        producer2 = client.create_producer(topic, schema=AvroSchema(User2))
        producer1.send(User1(name="one", age=100))
        producer2.send(User2(name="two", age=200))
        values = [consumer.receive(timeout_millis=10_000).value() for _ in range(2)]
        assert [(v.name, v.age) for v in values] == [("one", 100), ("two", 200)]
    finally:
        client.close()
