"""The admin route modules over HTTP: statuses, bodies and ``{"reason": ...}`` errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from dedup_broker.app.broker_app import http_app
from dedup_broker.metrics_registry import CONTENT_TYPE
from tests.unit.http.admin_fakes import FakeBroker, FakeSubscription

pytestmark = pytest.mark.timeout(30)

Client = TestClient[web.Request, web.Application]
TOPIC = "/admin/v2/persistent/public/default/orders"
NAMESPACE = "/admin/v2/namespaces/public/default"


def with_client(broker: FakeBroker, check: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with TestClient(
            TestServer(http_app(broker.as_broker(), broker.registry, broker))
        ) as client:
            await check(client)

    asyncio.run(asyncio.wait_for(main(), 20))


async def call(
    client: Client, method: str, path: str, body: bytes | None = None
) -> tuple[int, Any]:
    """Status and parsed JSON body (``None`` when empty)."""
    response = await client.request(method, path, data=body)
    raw = await response.read()
    return response.status, json.loads(raw) if raw else None


def test_health_and_metrics() -> None:
    broker = FakeBroker()
    broker.add_topic("persistent://public/default/orders")

    async def check(client: Client) -> None:
        response = await client.get("/admin/v2/brokers/health")
        assert (response.status, await response.text()) == (200, "ok")
        response = await client.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"] == CONTENT_TYPE
        families = {f.name: f for f in text_string_to_metric_families(await response.text())}
        assert families["pulsar_active_connections"].samples[0].value == 0

    with_client(broker, check)


def test_topic_lifecycle_statuses() -> None:
    broker = FakeBroker()

    async def check(client: Client) -> None:
        assert await call(client, "GET", TOPIC + "/stats") == (
            404,
            {"reason": "topic persistent://public/default/orders does not exist"},
        )
        assert await call(client, "PUT", TOPIC) == (204, None)
        assert await call(client, "PUT", TOPIC) == (
            409,
            {"reason": "topic persistent://public/default/orders already exists"},
        )
        assert await call(client, "GET", TOPIC + "/stats") == (
            200,
            {"msgInCounter": 3, "subscriptions": []},
        )
        assert await call(client, "GET", "/admin/v2/persistent/public/default") == (
            200,
            ["persistent://public/default/orders"],
        )
        status, body = await call(client, "GET", "/admin/v2/persistent/bad%20tenant/ns/t/stats")
        assert status == 412
        assert "invalid tenant 'bad tenant'" in body["reason"]

    with_client(broker, check)


def test_partitioned_topics() -> None:
    broker = FakeBroker()
    path = "/admin/v2/persistent/public/default/p"

    async def check(client: Client) -> None:
        assert await call(client, "PUT", path + "/partitions", b"not-a-number") == (
            400,
            {"reason": "expected a number of partitions as the body, got 'not-a-number'"},
        )
        assert await call(client, "PUT", path + "/partitions", b"4") == (204, None)
        assert await call(client, "PUT", path + "/partitions", b"4") == (
            409,
            {"reason": "partitioned topic persistent://public/default/p already exists"},
        )
        assert await call(client, "GET", path + "/partitions") == (200, {"partitions": 4})
        assert await call(client, "GET", TOPIC + "/partitioned-stats") == (
            404,
            {"reason": "partitioned topic persistent://public/default/orders does not exist"},
        )

    with_client(broker, check)


def test_deleting_a_subscription_with_consumers_is_a_conflict() -> None:
    broker = FakeBroker()
    topic = broker.add_topic("persistent://public/default/orders")
    topic.subscriptions["busy"] = FakeSubscription(consumers=[object()])
    topic.subscriptions["idle"] = FakeSubscription()

    async def check(client: Client) -> None:
        assert await call(client, "GET", TOPIC + "/subscriptions") == (200, ["busy", "idle"])
        assert await call(client, "DELETE", TOPIC + "/subscription/busy") == (
            409,
            {"reason": "subscription busy has consumers"},
        )
        assert await call(client, "DELETE", TOPIC + "/subscription/idle") == (204, None)
        assert await call(client, "GET", TOPIC + "/subscriptions") == (200, ["busy"])

    with_client(broker, check)


def test_deduplication_policies_take_booleans_and_intervals() -> None:
    broker = FakeBroker()

    async def check(client: Client) -> None:
        assert await call(client, "POST", NAMESPACE + "/deduplication", b"maybe") == (
            400,
            {"reason": "expected true or false as the body, got 'maybe'"},
        )
        assert await call(client, "POST", NAMESPACE + "/deduplication", b"true") == (204, None)
        assert await call(client, "GET", NAMESPACE + "/deduplication") == (200, True)
        assert await call(client, "POST", TOPIC + "/deduplicationEnabled", b"false") == (204, None)
        assert await call(client, "GET", TOPIC + "/deduplicationEnabled") == (200, False)
        assert await call(client, "DELETE", TOPIC + "/deduplicationEnabled") == (204, None)
        assert await call(client, "GET", TOPIC + "/deduplicationEnabled") == (200, None)
        interval = TOPIC + "/deduplicationSnapshotInterval"
        assert await call(client, "POST", interval, b"-1") == (
            400,
            {"reason": "the snapshot interval must be >= 0 seconds, got -1"},
        )
        assert await call(client, "POST", interval, b"30") == (204, None)
        assert await call(client, "GET", interval) == (200, 30)
        assert broker.policy_applications == 4

    with_client(broker, check)


def test_key_deduplication_policy_errors_are_400() -> None:
    broker = FakeBroker()
    policy = TOPIC + "/keyDeduplication"

    async def check(client: Client) -> None:
        status, body = await call(client, "POST", policy, b'{"enabled": true, "window": "soon"}')
        assert status == 400
        assert "soon" in body["reason"]
        status, body = await call(client, "POST", policy, b"{not json")
        assert status == 400
        assert body["reason"].startswith("request body is not valid JSON")
        valid = {"enabled": True, "keySource": "content", "window": "5m"}
        assert await call(client, "POST", policy, json.dumps(valid).encode()) == (204, None)
        assert await call(client, "GET", policy) == (200, valid)
        status, applied = await call(client, "GET", policy + "?applied=true")
        assert (status, applied["enabled"], applied["window"]) == (200, True, "5m")

    with_client(broker, check)


def test_retention_and_ledger_status_errors() -> None:
    broker = FakeBroker()

    async def check(client: Client) -> None:
        retention = NAMESPACE + "/retention"
        body = b'{"retentionTimeInMinutes": 5, "retentionSizeInMB": 0}'
        status, answer = await call(client, "POST", retention, body)
        assert status == 412
        assert answer["reason"].startswith("retention time and size must both be 0")
        assert (await call(client, "POST", retention, b"[1"))[0] == 400
        ledgers = "/admin/v2/ledger-deletion/ledgers/"
        assert await call(client, "GET", ledgers + "x?managedLedger=m") == (
            400,
            {"reason": "ledgerId must be an integer"},
        )
        assert await call(client, "GET", ledgers + "7") == (
            400,
            {"reason": "the managedLedger query parameter is required"},
        )

    with_client(broker, check)


def test_offload_trigger_and_threshold() -> None:
    broker = FakeBroker()
    topic = broker.add_topic("persistent://public/default/orders")

    async def check(client: Client) -> None:
        offload = TOPIC + "/offload"
        assert await call(client, "PUT", offload, b"[]") == (
            400,
            {"reason": 'expected a message id: {"ledgerId": .., "entryId": ..}'},
        )
        assert await call(client, "PUT", offload, b'{"ledgerId": 9, "entryId": 0}') == (204, None)
        assert [p.ledger_id for p in topic.managed_ledger.offloads.triggered] == [9]
        topic.managed_ledger.offloads.running = True
        assert await call(client, "PUT", offload, b'{"ledgerId": 10}') == (
            409,
            {"reason": "an offload of this topic is running"},
        )
        threshold = NAMESPACE + "/offloadThreshold"
        assert await call(client, "PUT", threshold, b"lots") == (
            400,
            {"reason": "expected a number of bytes as the body, got 'lots'"},
        )
        assert await call(client, "PUT", threshold, b"1024") == (204, None)
        assert await call(client, "GET", threshold) == (200, 1024)
        assert topic.managed_ledger.offloads.checks == 1

    with_client(broker, check)
