"""The admin REST calls Pulsar's Go admin client (``pulsaradmin``) makes on namespaces,
brokers and schemas beyond the topics' own policies, as its own test suite makes them:
the namespace-only policies (with Pulsar's statuses and messages), the ones that take
effect (``maxTopicsPerNamespace``, ``autoTopicCreation``), the brokers' listing and
dynamic configuration, and a schema's version by its definition."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pulsar
import pytest
import requests

from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path_factory.mktemp("namespaces-brokers"))


def admin(broker: BrokerProcess, method: str, path: str, body: Any = None) -> requests.Response:
    data = None if body is None else json.dumps(body)
    headers = {"Content-Type": "application/json"}
    return requests.request(method, broker.http_url + path, data=data, headers=headers, timeout=30)


def new_namespace(broker: BrokerProcess) -> str:
    namespace = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert admin(broker, "PUT", f"/admin/v2/namespaces/{namespace}").status_code == 204
    return namespace


def test_namespace_only_policies_read_back_as_pulsar_answers(served: BrokerProcess) -> None:
    ns = f"/admin/v2/namespaces/{new_namespace(served)}"
    unset = {
        "subscriptionExpirationTime": 204,
        "offloadDeletionLagMs": 204,
        "compactionThreshold": 204,
        "autoTopicCreation": 204,
        "persistence/bookieAffinity": 204,
    }
    for route, status in unset.items():
        assert admin(served, "GET", f"{ns}/{route}").status_code == status, route
    assert admin(served, "GET", f"{ns}/maxTopicsPerNamespace").json() == 0
    assert admin(served, "GET", f"{ns}/properties").json() == {}

    assert admin(served, "POST", f"{ns}/subscriptionExpirationTime", 60).status_code == 204
    assert admin(served, "GET", f"{ns}/subscriptionExpirationTime").json() == 60
    refused = admin(served, "POST", f"{ns}/subscriptionExpirationTime", -60)
    assert (refused.status_code, refused.json()["reason"]) == (
        412,
        "Invalid value for subscription expiration time",
    )
    assert admin(served, "DELETE", f"{ns}/subscriptionExpirationTime").status_code == 204
    assert admin(served, "GET", f"{ns}/subscriptionExpirationTime").status_code == 204

    assert admin(served, "PUT", f"{ns}/offloadDeletionLagMs", 1000).status_code == 204
    assert admin(served, "GET", f"{ns}/offloadDeletionLagMs").json() == 1000
    assert admin(served, "POST", f"{ns}/compactionThreshold", 0).status_code == 204
    assert admin(served, "GET", f"{ns}/compactionThreshold").json() == 0

    assert admin(served, "PUT", f"{ns}/properties", {"a": "1", "b": "2"}).status_code == 204
    assert admin(served, "PUT", f"{ns}/properties", {"b": "3"}).status_code == 204
    assert admin(served, "GET", f"{ns}/properties").json() == {"a": "1", "b": "3"}
    assert admin(served, "DELETE", f"{ns}/properties").status_code == 204
    assert admin(served, "GET", f"{ns}/properties").json() == {}

    affinity = {"bookkeeperAffinityGroupPrimary": "p", "bookkeeperAffinityGroupSecondary": "s"}
    assert admin(served, "POST", f"{ns}/persistence/bookieAffinity", affinity).status_code == 204
    assert admin(served, "GET", f"{ns}/persistence/bookieAffinity").json() == affinity

    missing = admin(served, "POST", "/admin/v2/namespaces/public/nowhere/maxTopicsPerNamespace", 1)
    assert (missing.status_code, missing.json()["reason"]) == (404, "Namespace does not exist")


def test_auto_topic_creation_override_is_checked_and_applied(served: BrokerProcess) -> None:
    namespace = new_namespace(served)
    route = f"/admin/v2/namespaces/{namespace}/autoTopicCreation"
    detail = "Invalid configuration for autoTopicCreationOverride. the detail is "
    refusals = {
        "[defaultNumPartitions] cannot be null when the type is partitioned.": {
            "allowAutoTopicCreation": True,
            "topicType": "partitioned",
        },
        "[defaultNumPartitions] cannot be less than 1 for partition type.": {
            "allowAutoTopicCreation": True,
            "topicType": "partitioned",
            "defaultNumPartitions": -1,
        },
        "[defaultNumPartitions] is not allowed to be set when the type is non-partition.": {
            "allowAutoTopicCreation": True,
            "topicType": "non-partitioned",
            "defaultNumPartitions": 3,
        },
    }
    for reason, body in refusals.items():
        answer = admin(served, "POST", route, body)
        assert (answer.status_code, answer.json()["reason"]) == (412, detail + reason)

    partitioned = {"allowAutoTopicCreation": True, "topicType": "partitioned"}
    assert (
        admin(served, "POST", route, {**partitioned, "defaultNumPartitions": 2}).status_code == 204
    )
    assert admin(served, "GET", route).json() == {**partitioned, "defaultNumPartitions": 2}
    client = pulsar.Client(served.service_url, operation_timeout_seconds=10)
    try:
        client.create_producer(f"persistent://{namespace}/auto-partitioned").send(b"m")
        metadata = admin(
            served, "GET", f"/admin/v2/persistent/{namespace}/auto-partitioned/partitions"
        )
        assert metadata.json() == {"partitions": 2}

        assert admin(served, "POST", route, {"allowAutoTopicCreation": False}).status_code == 204
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"persistent://{namespace}/not-created")
        assert admin(served, "DELETE", route).status_code == 204
        client.create_producer(f"persistent://{namespace}/created-again")
    finally:
        client.close()


def test_max_topics_per_namespace_limits_topic_creation(served: BrokerProcess) -> None:
    namespace = new_namespace(served)
    route = f"/admin/v2/namespaces/{namespace}/maxTopicsPerNamespace"
    refused = admin(served, "POST", route, -1)
    assert (refused.status_code, refused.json()["reason"]) == (
        412,
        "maxTopicsPerNamespace must be 0 or more",
    )
    assert admin(served, "POST", route, 1).status_code == 204
    assert admin(served, "GET", route).json() == 1
    topics = f"/admin/v2/persistent/{namespace}"
    assert admin(served, "PUT", f"{topics}/first").status_code == 204
    assert admin(served, "PUT", f"{topics}/second").status_code == 412
    assert admin(served, "DELETE", route).status_code == 204
    assert admin(served, "PUT", f"{topics}/second").status_code == 204


def test_brokers_and_their_dynamic_configuration(served: BrokerProcess) -> None:
    brokers = admin(served, "GET", "/admin/v2/brokers").json()
    leader = admin(served, "GET", "/admin/v2/brokers/leaderBroker").json()
    assert leader["brokerId"] in brokers
    assert leader["serviceUrl"].startswith("http://")

    value = '{"key/123":"https://example.com/"}'
    path = "/admin/v2/brokers/configuration/allowAutoSubscriptionCreation/"
    assert (
        requests.post(served.http_url + path + quote(value, safe=""), timeout=15).status_code == 200
    )
    given = admin(served, "GET", "/admin/v2/brokers/configuration/values").json()
    assert json.loads(given["allowAutoSubscriptionCreation"]) == {"key/123": "https://example.com/"}
    assert (
        "allowAutoSubscriptionCreation"
        in admin(served, "GET", "/admin/v2/brokers/configuration").json()
    )
    refused = admin(served, "POST", "/admin/v2/brokers/configuration/noSuchSetting/1")
    assert (refused.status_code, refused.json()["reason"]) == (
        412,
        "Can't update non-dynamic configuration",
    )
    deleted = "/admin/v2/brokers/configuration/allowAutoSubscriptionCreation"
    assert admin(served, "DELETE", deleted).status_code == 204
    assert admin(served, "GET", "/admin/v2/brokers/configuration/values").json() == {}


def test_a_schemas_version_is_found_by_its_definition(served: BrokerProcess) -> None:
    topic = f"public/default/schema-{uuid.uuid4().hex[:8]}"
    payload = {"type": "STRING", "schema": "", "properties": {}}
    base = f"/admin/v2/schemas/{topic}"
    assert admin(served, "POST", f"{base}/schema", payload).status_code == 202
    assert admin(served, "POST", f"{base}/version", payload).json() == {"version": 0}
    other = {"type": "JSON", "schema": '{"type": "record", "name": "R", "fields": []}'}
    assert admin(served, "POST", f"{base}/version", other).status_code == 404
