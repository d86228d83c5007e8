"""The admin REST calls Pulsar's Go admin client (``pulsaradmin``) makes on topics, as its
own test suite makes them, seen through HTTP and the official Python client: topic
properties, stats' timestamps and exclusions, peeking at a subscription, message ids by
time, subscriptions of a partitioned topic, and the topic-level policies that take effect
(retention, schema strategy and validation, automatic subscription creation, delayed
delivery)."""

from __future__ import annotations

import datetime
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
import requests

from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve

NAMESPACE = "public/default"


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path_factory.mktemp("topic-calls"))


@pytest.fixture(scope="module")
def client(served: BrokerProcess) -> Iterator[pulsar.Client]:
    made = pulsar.Client(served.service_url, operation_timeout_seconds=15)
    try:
        yield made
    finally:
        made.close()


def admin(broker: BrokerProcess, method: str, path: str, body: Any = None) -> requests.Response:
    data = None if body is None else json.dumps(body)
    headers = {"Content-Type": "application/json"}
    return requests.request(method, broker.http_url + path, data=data, headers=headers, timeout=30)


def new_local_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topic_properties_given_at_creation_and_later(served: BrokerProcess) -> None:
    plain = f"/admin/v2/persistent/{NAMESPACE}/{new_local_name('props')}"
    assert admin(served, "PUT", plain, {"key1": "value1"}).status_code == 204
    assert admin(served, "GET", f"{plain}/properties").json() == {"key1": "value1"}
    update = {"key1": "value1-updated", "key2": "value2"}
    assert admin(served, "PUT", f"{plain}/properties", update).status_code == 204
    assert admin(served, "DELETE", f"{plain}/properties?key=key1").status_code == 204
    assert admin(served, "GET", f"{plain}/properties").json() == {"key2": "value2"}

    partitioned = f"/admin/v2/persistent/{NAMESPACE}/{new_local_name('props-p')}"
    body = {"partitions": 2, "properties": {"a": "b"}}
    assert admin(served, "PUT", f"{partitioned}/partitions", body).status_code == 204
    assert admin(served, "GET", f"{partitioned}/properties").json() == {"a": "b"}
    assert admin(served, "DELETE", f"{partitioned}/partitions").status_code == 204
    assert admin(served, "GET", f"{partitioned}/properties").status_code == 404
    assert admin(served, "PUT", f"{partitioned}/partitions", {"partitions": 1}).status_code == 204
    assert admin(served, "GET", f"{partitioned}/properties").json() == {}  # forgotten


def test_stats_timestamps_and_exclusions(served: BrokerProcess, client: pulsar.Client) -> None:
    local = new_local_name("stats")
    path = f"/admin/v2/persistent/{NAMESPACE}/{local}"
    assert admin(served, "PUT", path).status_code == 204
    before = admin(served, "GET", f"{path}/stats").json()
    assert before["topicCreationTimeStamp"] > 0 and before["lastPublishTimeStamp"] == 0
    consumer = client.subscribe(f"persistent://{NAMESPACE}/{local}", "s")
    client.create_producer(f"persistent://{NAMESPACE}/{local}").send(b"m")
    consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    stats = admin(served, "GET", f"{path}/stats").json()
    assert stats["lastPublishTimeStamp"] >= before["topicCreationTimeStamp"]
    subscription = stats["subscriptions"]["s"]
    assert subscription["consumersAfterMarkDeletePosition"] == {}
    assert subscription["consumers"][0]["lastConsumedFlowTimestamp"] > 0
    query = "?excludePublishers=true&excludeConsumers=true"
    trimmed = admin(served, "GET", f"{path}/stats{query}").json()
    assert trimmed["publishers"] == [] and trimmed["subscriptions"]["s"]["consumers"] == []

    partitioned = f"/admin/v2/persistent/{NAMESPACE}/{local}-p"
    assert admin(served, "PUT", f"{partitioned}/partitions", 2).status_code == 204
    fresh = admin(served, "GET", f"{partitioned}/partitioned-stats").json()
    assert fresh["topicCreationTimeStamp"] > 0 and fresh["lastPublishTimeStamp"] == 0
    client.create_producer(f"persistent://{NAMESPACE}/{local}-p").send(b"m")
    published = admin(served, "GET", f"{partitioned}/partitioned-stats{query}").json()
    assert published["lastPublishTimeStamp"] > 0 and published["publishers"] == []


def test_peek_message_ids_by_time_and_partitioned_subscriptions(
    served: BrokerProcess, client: pulsar.Client
) -> None:
    local = new_local_name("peek")
    topic = f"persistent://{NAMESPACE}/{local}"
    path = f"/admin/v2/persistent/{NAMESPACE}/{local}"
    producer = client.create_producer(topic, batching_enabled=False)
    properties = {"key1": "value1", "details=man": "good at playing basketball"}
    first = producer.send(b"first", properties=properties)
    producer.send(b"second")
    peeked = admin(served, "GET", f"{path}/subscription/peeker/position/1")
    assert peeked.status_code == 200 and peeked.content == b"first"
    assert json.loads(peeked.headers["X-Pulsar-Property"]) == properties
    assert peeked.headers["X-Pulsar-PROPERTY-key1"] == "value1"
    assert "X-Pulsar-PROPERTY-details=man" not in peeked.headers
    assert admin(served, "GET", f"{path}/subscription/peeker/position/2").content == b"second"
    assert admin(served, "GET", f"{path}/subscription/peeker/position/3").status_code == 404
    assert "peeker" in admin(served, "GET", f"{path}/subscriptions").json()

    published = datetime.datetime.fromisoformat(peeked.headers["X-Pulsar-publish-time"])
    at = int(published.timestamp() * 1000) - 1000
    found = admin(served, "GET", f"{path}/messageid/{at}").json()
    assert (found["ledgerId"], found["entryId"]) == (first.ledger_id(), first.entry_id())
    later = int(time.time() * 1000) + 60_000
    assert admin(served, "GET", f"{path}/messageid/{later}").status_code == 404

    partitioned = f"{path}-p"
    assert admin(served, "PUT", f"{partitioned}/partitions", 2).status_code == 204
    earliest = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1, "batchIndex": -1}
    assert admin(served, "PUT", f"{partitioned}/subscription/all", earliest).status_code == 204
    for index in range(2):
        listed = admin(served, "GET", f"{partitioned}-partition-{index}/subscriptions").json()
        assert listed == ["all"]


def test_topic_level_policies_that_apply(served: BrokerProcess, client: pulsar.Client) -> None:
    local = new_local_name("policies")
    topic = f"persistent://{NAMESPACE}/{local}"
    path = f"/admin/v2/persistent/{NAMESPACE}/{local}"
    assert admin(served, "PUT", path).status_code == 204

    assert admin(served, "GET", f"{path}/retention").status_code == 204
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    assert admin(served, "POST", f"{path}/retention", retention).status_code == 204
    assert admin(served, "GET", f"{path}/retention").json() == retention
    bad = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}
    assert admin(served, "POST", f"{path}/retention", bad).status_code == 412

    strategy = f"{path}/schemaCompatibilityStrategy"
    assert admin(served, "GET", f"{strategy}?applied=true").json() == "FULL"
    assert admin(served, "PUT", strategy, "ALWAYS_INCOMPATIBLE").status_code == 204
    schemas = f"/admin/v2/schemas/{NAMESPACE}/{local}/schema"
    first = {"type": "JSON", "schema": '{"type":"record","name":"A","fields":[]}'}
    second = {"type": "JSON", "schema": '{"type":"record","name":"B","fields":[]}'}
    assert admin(served, "POST", schemas, first).status_code == 202
    assert admin(served, "POST", schemas, second).status_code == 409
    assert admin(served, "DELETE", strategy).status_code == 204
    assert admin(served, "GET", f"{strategy}?applied=false").status_code == 204

    enforced = f"{path}/schemaValidationEnforced"
    assert admin(served, "POST", enforced, True).status_code == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic)
    assert admin(served, "DELETE", enforced).status_code == 204
    client.create_producer(topic).close()

    subscriptions = f"{path}/autoSubscriptionCreation"
    client.subscribe(topic, "existing").close()
    refused = {"allowAutoSubscriptionCreation": False}
    assert admin(served, "POST", subscriptions, refused).status_code == 204
    impatient = pulsar.Client(served.service_url, operation_timeout_seconds=3)
    try:  # the client retries SubscriptionNotFound until its operation timeout
        with pytest.raises((pulsar.SubscriptionNotFound, pulsar.Timeout)):
            impatient.subscribe(topic, "not-created")
    finally:
        impatient.close()
    assert admin(served, "GET", f"{path}/subscriptions").json() == ["existing"]
    client.subscribe(topic, "existing").close()
    assert admin(served, "DELETE", subscriptions).status_code == 204


def test_delayed_delivery_follows_the_topics_policy(
    served: BrokerProcess, client: pulsar.Client
) -> None:
    """With the topic's ``delayedDelivery`` inactive a Shared consumer gets a delayed
    message at once; without the policy the broker's (active) holds it back."""
    local = new_local_name("delayed")
    topic = f"persistent://{NAMESPACE}/{local}"
    policy = f"/admin/v2/persistent/{NAMESPACE}/{local}/delayedDelivery"
    producer = client.create_producer(topic, batching_enabled=False)
    inactive = {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
    assert admin(served, "POST", policy, inactive).status_code == 204
    shared = pulsar.ConsumerType.Shared
    consumer = client.subscribe(topic, "s", consumer_type=shared)
    producer.send(b"now", deliver_after=datetime.timedelta(minutes=1))
    assert consumer.receive(timeout_millis=10_000).data() == b"now"
    assert admin(served, "DELETE", policy).status_code == 204
    producer.send(b"later", deliver_after=datetime.timedelta(minutes=1))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=2_000)
