"""Routes under a namespace need the namespace: 404 with Pulsar's reasons while it or its
tenant does not exist, whatever the route, until a user creates them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from dedup_broker.app.broker_app import http_app
from tests.unit.http.admin_fakes import FakeBroker

pytestmark = pytest.mark.timeout(30)

Client = TestClient[web.Request, web.Application]


async def call(
    client: Client, method: str, path: str, body: bytes | None = None
) -> tuple[int, Any]:
    response = await client.request(method, path, data=body)
    raw = await response.read()
    return response.status, json.loads(raw) if raw else None


def test_routes_under_a_missing_tenant_or_namespace_are_404() -> None:
    broker = FakeBroker()
    tenant_missing = (404, {"reason": "Tenant does not exist"})
    namespace_missing = (404, {"reason": "Namespace does not exist"})

    async def check(client: Client) -> None:
        assert await call(client, "PUT", "/admin/v2/persistent/nosuchtenant/x/t1") == (
            tenant_missing
        )
        for method, path in (
            ("PUT", "/admin/v2/persistent/public/nosuchns/t"),
            ("PUT", "/admin/v2/non-persistent/public/nosuchns/t"),
            ("PUT", "/admin/v2/persistent/public/nosuchns/p/partitions"),
            ("GET", "/admin/v2/persistent/public/nosuchns/p/partitions"),
            ("GET", "/admin/v2/persistent/public/nosuchns/t/stats"),
            ("GET", "/admin/v2/persistent/public/nosuchns"),
            ("GET", "/admin/v2/namespaces/public/nosuchns/topics"),
            ("POST", "/admin/v2/namespaces/public/nosuchns/deduplication"),
            ("GET", "/admin/v2/schemas/public/nosuchns/t/schema"),
            ("DELETE", "/admin/v2/namespaces/public/nosuchns"),
        ):
            assert await call(client, method, path, b"true") == namespace_missing, path
        assert broker.topics == {}
        # Created as a user would, then served; a namespace of a missing tenant is not.
        assert await call(client, "PUT", "/admin/v2/namespaces/acme/app") == (
            404,
            {"reason": "Tenant does not exist: acme"},
        )
        body = json.dumps({"adminRoles": [], "allowedClusters": [broker.config.cluster_name]})
        assert await call(client, "PUT", "/admin/v2/tenants/acme", body.encode()) == (204, None)
        assert await call(client, "PUT", "/admin/v2/namespaces/acme/app") == (204, None)
        assert await call(client, "PUT", "/admin/v2/persistent/acme/app/t") == (204, None)
        assert await call(client, "GET", "/admin/v2/persistent/acme/app") == (
            200,
            ["persistent://acme/app/t"],
        )
        # A malformed name is still the handler's 412, not a missing namespace.
        status, _ = await call(client, "GET", "/admin/v2/persistent/bad%20tenant/ns/t/stats")
        assert status == 412

    async def main() -> None:
        app = http_app(broker.as_broker(), broker.registry, broker)
        async with TestClient(TestServer(app)) as client:
            await check(client)

    asyncio.run(asyncio.wait_for(main(), 20))
