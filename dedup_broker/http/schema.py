"""Admin routes of the schema registry, in Pulsar's REST shape.

- ``GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema`` (latest) and
  ``.../schema/{version}``: ``GetSchemaResponse`` ``{"version", "type", "timestamp",
  "data", "properties"}``; ``GET .../schemas``: ``{"getSchemaResponses": [...]}``
- ``POST .../schema`` with a ``PostSchemaPayload`` ``{"type", "schema", "properties"}``:
  202 with ``{"version": {"version": n}}`` (Pulsar's ``PostSchemaResponse``)
- ``DELETE .../schema``: every version, ``{"version": n}`` (the last one deleted)
- ``POST .../compatibility``: ``{"compatibility": bool, "schemaCompatibilityStrategy"}``
- ``POST .../version`` with a ``PostSchemaPayload``: ``{"version": n}``, the version
  holding that schema (404 when none does)
- ``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/schemaCompatibilityStrategy``
  (the body a JSON string such as ``"BACKWARD"``; ``GET`` answers ``"UNDEFINED"`` unset)
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web

from dedup_broker.domain_base.names import TopicName
from dedup_broker.http.bodies import json_response, no_content, read_json, read_text
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.paths import NAMESPACES, namespace_of
from dedup_broker.schema.compatibility import (
    CompatibilityStrategy,
    IncompatibleSchemaError,
    InvalidStrategyError,
    SchemaInfo,
    SchemaNotFoundError,
    SchemaType,
)
from dedup_broker.schema.registry import SchemaRegistry, StoredSchema

SCHEMA_TOPIC = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NAMESPACE_STRATEGY = NAMESPACES + "/schemaCompatibilityStrategy"
UNDEFINED = "UNDEFINED"

SCHEMA_ERROR_STATUSES: ErrorStatuses = {
    SchemaNotFoundError: HTTPStatus.NOT_FOUND,
    IncompatibleSchemaError: HTTPStatus.CONFLICT,
    InvalidStrategyError: HTTPStatus.BAD_REQUEST,
}
"""Pulsar's answers: no schema 404, an incompatible schema 409."""


def schema_routes(registry: SchemaRegistry) -> list[web.RouteDef]:
    api = _SchemaApi(registry)
    return [
        web.get(SCHEMA_TOPIC + "/schema", api.get_latest),
        web.get(SCHEMA_TOPIC + "/schema/{version}", api.get_version),
        web.get(SCHEMA_TOPIC + "/schemas", api.get_all),
        web.post(SCHEMA_TOPIC + "/schema", api.post_schema),
        web.delete(SCHEMA_TOPIC + "/schema", api.delete_schema),
        web.post(SCHEMA_TOPIC + "/compatibility", api.compatibility),
        web.post(SCHEMA_TOPIC + "/version", api.version_of_schema),
        web.get(NAMESPACE_STRATEGY, api.get_strategy),
        web.post(NAMESPACE_STRATEGY, api.set_strategy),
        web.put(NAMESPACE_STRATEGY, api.set_strategy),
        web.delete(NAMESPACE_STRATEGY, api.remove_strategy),
    ]


def _topic(request: web.Request) -> TopicName:
    p = request.match_info
    return TopicName.parse(f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}")


def schema_response(stored: StoredSchema) -> dict[str, Any]:
    """Pulsar's ``GetSchemaResponse`` (the definition as text)."""
    return {
        "version": stored.version,
        "type": stored.info.type.value,
        "timestamp": stored.timestamp,
        "data": stored.info.data.decode("utf-8", errors="replace"),
        "properties": dict(sorted(stored.info.properties.items())),
    }


def parse_payload(body: Any) -> SchemaInfo:
    """Pulsar's ``PostSchemaPayload``: ``{"type", "schema", "properties"}``."""
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise HttpError(HTTPStatus.BAD_REQUEST, 'expected {"type", "schema", "properties"}')
    definition = body.get("schema") or ""
    properties = body.get("properties") or {}
    if not isinstance(definition, str) or not isinstance(properties, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, "schema must be a string, properties an object")
    try:
        schema_type = SchemaType.parse(body["type"])
    except IncompatibleSchemaError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
    return SchemaInfo(
        schema_type,
        definition.encode("utf-8"),
        {str(k): str(v) for k, v in properties.items()},
    )


class _SchemaApi:
    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry

    async def get_latest(self, request: web.Request) -> web.Response:
        return json_response(schema_response(self.registry.get(_topic(request))))

    async def get_version(self, request: web.Request) -> web.Response:
        text = request.match_info["version"]
        try:
            version = int(text)
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid schema version {text!r}") from None
        return json_response(schema_response(self.registry.get(_topic(request), version)))

    async def get_all(self, request: web.Request) -> web.Response:
        versions = self.registry.versions(_topic(request))
        if not versions:
            raise SchemaNotFoundError("Schema not found")
        return json_response({"getSchemaResponses": [schema_response(s) for s in versions]})

    async def post_schema(self, request: web.Request) -> web.Response:
        schema = parse_payload(await read_json(request))
        stored = await self.registry.register(_topic(request), schema)
        return json_response({"version": {"version": stored.version}}, HTTPStatus.ACCEPTED)

    async def delete_schema(self, request: web.Request) -> web.Response:
        last = await self.registry.delete(_topic(request))
        if last is None:
            raise SchemaNotFoundError("Schema not found")
        return json_response({"version": last})

    async def compatibility(self, request: web.Request) -> web.Response:
        schema = parse_payload(await read_json(request))
        name = _topic(request)
        return json_response(
            {
                "compatibility": self.registry.is_compatible(name, schema),
                "schemaCompatibilityStrategy": self.registry.strategy_of(name).value,
            }
        )

    async def version_of_schema(self, request: web.Request) -> web.Response:
        schema = parse_payload(await read_json(request))
        found = self.registry.find(_topic(request), schema)
        if found is None:
            raise SchemaNotFoundError("Not found schema")
        return json_response({"version": found.version})

    async def get_strategy(self, request: web.Request) -> web.Response:
        strategy = self.registry.namespace_strategy(namespace_of(request))
        return json_response(strategy.value if strategy is not None else UNDEFINED)

    async def set_strategy(self, request: web.Request) -> web.Response:
        text = (await read_text(request)).strip().strip('"')
        strategy = None if text.upper() == UNDEFINED else CompatibilityStrategy.parse(text)
        await self.registry.set_namespace_strategy(namespace_of(request), strategy)
        return no_content()

    async def remove_strategy(self, request: web.Request) -> web.Response:
        await self.registry.set_namespace_strategy(namespace_of(request), None)
        return no_content()
