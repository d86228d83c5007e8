"""Admin routes of key-window deduplication, in Pulsar's REST shape.

``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/keyDeduplication`` and
``/admin/v2/persistent/{tenant}/{namespace}/{topic}/keyDeduplication`` with a JSON body
such as ``{"enabled": true, "keySource": "content", "window": "5m", "scope": "topic"}``;
``GET`` with ``?applied=true`` answers the effective policy. Broker-wide counters are at
``GET /admin/v2/broker-stats/keyDeduplication``.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from dedup_broker.domain_base.policies import Policies
from dedup_broker.http.bodies import json_response, no_content, read_json
from dedup_broker.http.errors import ErrorStatuses
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, query_value, topic_of
from dedup_broker.key_dedup.service import POLICY, KeyDedupService
from dedup_broker.key_dedup.window import InvalidKeyDedupPolicyError, KeyDedupPolicy

TOPIC_POLICY = TOPIC + "/keyDeduplication"
NAMESPACE_POLICY = NAMESPACES + "/keyDeduplication"
BROKER_STATS = "/admin/v2/broker-stats/keyDeduplication"


KEY_DEDUP_ERROR_STATUSES: ErrorStatuses = {InvalidKeyDedupPolicyError: HTTPStatus.BAD_REQUEST}
"""A malformed policy is the client's mistake in the body: 400, not the generic 412."""


def key_dedup_routes(policies: Policies, key_dedup: KeyDedupService) -> list[web.RouteDef]:
    """Failures are answered with ``KEY_DEDUP_ERROR_STATUSES`` among the app's statuses."""
    api = _KeyDedupApi(policies, key_dedup)
    return [
        web.get(NAMESPACE_POLICY, api.get_namespace),
        web.post(NAMESPACE_POLICY, api.set_namespace),
        web.delete(NAMESPACE_POLICY, api.remove_namespace),
        web.get(TOPIC_POLICY, api.get_topic),
        web.post(TOPIC_POLICY, api.set_topic),
        web.delete(TOPIC_POLICY, api.remove_topic),
        web.get(BROKER_STATS, api.broker_stats),
    ]


def _applied(request: web.Request) -> bool:
    return query_value(request, "applied", "false").lower() in ("true", "1")


class _KeyDedupApi:
    def __init__(self, policies: Policies, key_dedup: KeyDedupService) -> None:
        self.policies = policies
        self.key_dedup = key_dedup

    async def _body(self, request: web.Request) -> dict[str, object]:
        body = await read_json(request)
        KeyDedupPolicy.from_json(body, self.key_dedup.defaults)  # validates
        assert isinstance(body, dict)
        return body

    async def get_namespace(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        value = self.policies.namespace_value(namespace, POLICY)
        if _applied(request):
            defaults = self.key_dedup.defaults
            policy = KeyDedupPolicy.from_json(value, defaults) if value is not None else defaults
            return json_response(policy.to_json())
        return json_response(value)

    async def set_namespace(self, request: web.Request) -> web.Response:
        await self.policies.set_namespace_value(
            namespace_of(request), POLICY, await self._body(request)
        )
        await self.key_dedup.apply_policies()
        return no_content()

    async def remove_namespace(self, request: web.Request) -> web.Response:
        await self.policies.set_namespace_value(namespace_of(request), POLICY, None)
        await self.key_dedup.apply_policies()
        return no_content()

    async def get_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        if _applied(request):
            return json_response(self.key_dedup.policy_for(name).to_json())
        return json_response(self.policies.topic_value(name, POLICY))

    async def set_topic(self, request: web.Request) -> web.Response:
        await self.policies.set_topic_value(topic_of(request), POLICY, await self._body(request))
        await self.key_dedup.apply_policies()
        return no_content()

    async def remove_topic(self, request: web.Request) -> web.Response:
        await self.policies.set_topic_value(topic_of(request), POLICY, None)
        await self.key_dedup.apply_policies()
        return no_content()

    async def broker_stats(self, request: web.Request) -> web.Response:
        return json_response(self.key_dedup.stats())
