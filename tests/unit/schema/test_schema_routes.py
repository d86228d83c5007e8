"""The schema admin routes through the app's HTTP surface (Pulsar's JSON shapes)."""

from __future__ import annotations

import json

import pytest

from tests.unit.http.admin_fakes import FakeBroker
from tests.unit.http.test_admin_routes import Client, call, with_client

pytestmark = pytest.mark.timeout(30)

BASE = "/admin/v2/schemas/public/default/orders"
STRATEGY = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"


def payload(*fields: dict[str, object], kind: str = "AVRO") -> bytes:
    definition = {"type": "record", "name": "Order", "fields": list(fields)}
    body = {"type": kind, "schema": json.dumps(definition), "properties": {"k": "v"}}
    return json.dumps(body).encode()


ID = {"name": "id", "type": "long"}
NOTE = {"name": "note", "type": ["null", "string"], "default": None}


def test_schema_lifecycle() -> None:
    async def check(client: Client) -> None:
        assert await call(client, "GET", f"{BASE}/schema") == (404, {"reason": "Schema not found"})
        assert (await call(client, "GET", f"{BASE}/schemas"))[0] == 404
        assert await call(client, "POST", f"{BASE}/schema", payload(ID)) == (
            202,
            {"version": {"version": 0}},
        )
        assert await call(client, "POST", f"{BASE}/schema", payload(ID, NOTE)) == (
            202,
            {"version": {"version": 1}},
        )
        status, latest = await call(client, "GET", f"{BASE}/schema")
        assert status == 200
        assert set(latest) == {"version", "type", "timestamp", "data", "properties"}
        assert latest["version"] == 1 and latest["type"] == "AVRO"
        assert json.loads(latest["data"])["fields"][1]["name"] == "note"
        assert latest["properties"] == {"k": "v"}
        status, first = await call(client, "GET", f"{BASE}/schema/0")
        assert status == 200 and first["version"] == 0
        assert (await call(client, "GET", f"{BASE}/schema/7"))[0] == 404
        assert (await call(client, "GET", f"{BASE}/schema/x"))[0] == 400
        status, everything = await call(client, "GET", f"{BASE}/schemas")
        assert status == 200
        assert [s["version"] for s in everything["getSchemaResponses"]] == [0, 1]
        status, refused = await call(client, "POST", f"{BASE}/schema", payload(NOTE))
        assert status == 409 and "id" in refused["reason"]
        assert await call(client, "POST", f"{BASE}/compatibility", payload(NOTE)) == (
            200,
            {"compatibility": False, "schemaCompatibilityStrategy": "FULL"},
        )
        assert await call(client, "DELETE", f"{BASE}/schema") == (200, {"version": 1})
        assert (await call(client, "GET", f"{BASE}/schema"))[0] == 404
        assert (await call(client, "POST", f"{BASE}/schema", b"[]"))[0] == 400
        bad_type = json.dumps({"type": "NOPE", "schema": ""}).encode()
        assert (await call(client, "POST", f"{BASE}/schema", bad_type))[0] == 400

    with_client(FakeBroker(), check)


def test_namespace_strategy() -> None:
    async def check(client: Client) -> None:
        assert await call(client, "GET", STRATEGY) == (200, "UNDEFINED")
        assert (await call(client, "POST", STRATEGY, b'"BACKWARD"'))[0] == 204
        assert await call(client, "GET", STRATEGY) == (200, "BACKWARD")
        await call(client, "POST", f"{BASE}/schema", payload(ID, NOTE))
        assert await call(client, "POST", f"{BASE}/compatibility", payload(ID)) == (
            200,
            {"compatibility": True, "schemaCompatibilityStrategy": "BACKWARD"},
        )
        assert (await call(client, "POST", STRATEGY, b'"SOMETIMES"'))[0] == 400
        assert (await call(client, "DELETE", STRATEGY))[0] == 204
        assert await call(client, "GET", STRATEGY) == (200, "UNDEFINED")

    with_client(FakeBroker(), check)
