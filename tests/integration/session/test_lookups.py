"""Lookups the official clients make before producing or consuming, on a real broker:
a topic whose tenant or namespace does not exist, or whose name is not valid, is refused
with a code the clients treat as final, so the call fails at once instead of retrying
until the operation timeout; the namespace works once created through the admin API."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest

from harness.admin_http import create_namespace, http_request
from harness.broker_process import BrokerProcess
from harness.pulsar_java import run_java_client

OPERATION_TIMEOUT_SECONDS = 10
AT_ONCE_SECONDS = 5.0
"""Well under the operation timeout: the clients gave up at the first answer."""


@pytest.fixture
def slow_client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    """A client that would keep retrying a lookup for 10 s (the issue's setting)."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_SECONDS)
    try:
        yield client
    finally:
        client.close()


def fails_at_once(expected: type[Exception], call: Callable[..., object], *args: object) -> None:
    started = time.monotonic()
    with pytest.raises(expected):
        call(*args)
    assert time.monotonic() - started < AT_ONCE_SECONDS


def test_producers_and_consumers_of_missing_tenants_and_namespaces_fail_at_once(
    broker: BrokerProcess, slow_client: pulsar.Client
) -> None:
    for topic in (
        f"nosuchtenant/ns/t-{uuid.uuid4().hex[:6]}",
        f"persistent://public/nosuchns/t-{uuid.uuid4().hex[:6]}",
        f"non-persistent://public/nosuchns/t-{uuid.uuid4().hex[:6]}",
    ):
        fails_at_once(pulsar.TopicNotFound, slow_client.create_producer, topic)
        fails_at_once(pulsar.TopicNotFound, slow_client.subscribe, topic, "s")
        earliest = pulsar.MessageId.earliest
        fails_at_once(pulsar.TopicNotFound, slow_client.create_reader, topic, earliest)
    # Nothing was created: no topic is listed, no namespace appeared.
    status, body = http_request("GET", f"{broker.http_url}/admin/v2/namespaces/public")
    assert (status, json.loads(body)) == (200, ["public/default"])
    status, body = http_request("GET", f"{broker.http_url}/admin/v2/persistent/public/nosuchns")
    assert (status, json.loads(body)) == (404, {"reason": "Namespace does not exist"})


def test_the_asyncio_client_gets_topic_not_found(broker: BrokerProcess) -> None:
    """The official asyncio client's own test: ``create_producer('tenant/ns/...')``."""
    from pulsar.asyncio import Client, PulsarException

    async def create() -> pulsar.Result:
        client = Client(broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_SECONDS)
        try:
            await client.create_producer("tenant/ns/asyncio-test-send-failure")
        except PulsarException as failure:
            return failure.error()
        finally:
            await client.close()
        return pulsar.Result.Ok

    started = time.monotonic()
    assert asyncio.run(create()) == pulsar.Result.TopicNotFound
    assert time.monotonic() - started < AT_ONCE_SECONDS


def test_an_invalid_topic_name_fails_at_once(slow_client: pulsar.Client) -> None:
    """Before, the client asked for the partitioned metadata 8 times over 10 s."""
    bad = "persistent://public/default/bad name"
    fails_at_once(pulsar.NotAllowedError, slow_client.create_producer, bad)
    fails_at_once(pulsar.NotAllowedError, slow_client.subscribe, bad, "s")


def test_a_namespace_created_through_the_admin_api_is_used(
    broker: BrokerProcess, slow_client: pulsar.Client
) -> None:
    namespace = f"acme-{uuid.uuid4().hex[:6]}/app"
    topic = f"persistent://{namespace}/orders"
    fails_at_once(pulsar.TopicNotFound, slow_client.create_producer, topic)
    create_namespace(broker.http_url, namespace, broker.cluster_name)
    consumer = slow_client.subscribe(topic, "s")
    slow_client.create_producer(topic).send(b"hello")
    assert consumer.receive(timeout_millis=10_000).data() == b"hello"
    status, body = http_request("GET", f"{broker.http_url}/admin/v2/namespaces/{namespace}/topics")
    assert (status, json.loads(body)) == (200, [topic])
    tenant = namespace.split("/")[0]
    status, body = http_request("GET", f"{broker.http_url}/admin/v2/namespaces/{tenant}")
    assert (status, json.loads(body)) == (200, [namespace])


def test_http_refuses_topics_of_missing_tenants_and_namespaces(broker: BrokerProcess) -> None:
    base = f"{broker.http_url}/admin/v2"
    tenant_missing = (404, {"reason": "Tenant does not exist"})
    namespace_missing = (404, {"reason": "Namespace does not exist"})

    def answer(method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
        status, raw = http_request(method, base + path, body)
        return status, json.loads(raw) if raw else None

    assert answer("PUT", "/persistent/nosuchtenant/x/t1") == tenant_missing
    assert answer("PUT", "/persistent/public/nosuchns/t1") == namespace_missing
    assert answer("PUT", "/persistent/public/nosuchns/p/partitions", b"2") == namespace_missing
    assert answer("GET", "/namespaces/public/nosuchns/topics") == namespace_missing
    assert answer("GET", "/persistent/public/nosuchns/t1/stats") == namespace_missing
    lookup = f"{broker.http_url}/lookup/v2/topic/persistent/public/nosuchns/t1"
    status, raw = http_request("GET", lookup)
    assert (status, json.loads(raw)) == namespace_missing
    assert answer("GET", "/namespaces/public") == (200, ["public/default"])


def test_the_java_client_fails_at_once(broker: BrokerProcess) -> None:
    """The Java client (30 s operation timeout in the driver) gives up at the first
    answer too: ``TopicDoesNotExistException`` and ``NotAllowedException`` are final."""
    for topic, exception in (
        ("persistent://nosuchtenant/ns/t", "TopicDoesNotExistException"),
        ("persistent://public/default/bad name", "NotAllowedException"),
    ):
        started = time.monotonic()
        result = run_java_client("produce", broker.service_url, topic, "1", "batching=none")
        elapsed = time.monotonic() - started
        assert result.returncode != 0
        assert exception in result.stderr, result.stderr[-3000:]
        assert elapsed < 15.0, elapsed  # the JVM's start included
