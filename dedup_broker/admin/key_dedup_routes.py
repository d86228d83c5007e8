"""Admin routes of key-window deduplication, in Pulsar's REST shape.

``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/keyDeduplication`` and
``/admin/v2/persistent/{tenant}/{namespace}/{topic}/keyDeduplication`` with a JSON body
such as ``{"enabled": true, "keySource": "content", "window": "5m", "scope": "topic"}``;
``GET`` with ``?applied=true`` answers the effective policy. Broker-wide counters are at
``GET /admin/v2/broker-stats/keyDeduplication``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dedup_broker.admin.http import Handler, HttpError, Request, Response, json_response, no_content
from dedup_broker.admin.paths import NAMESPACES, TOPIC, Route, namespace_of, topic_of
from dedup_broker.errors import BrokerError, InvalidTopicNameError
from dedup_broker.key_dedup.service import POLICY
from dedup_broker.key_dedup.window import InvalidKeyDedupPolicyError, KeyDedupPolicy

if TYPE_CHECKING:
    from dedup_broker.domain.broker import Broker

TOPIC_POLICY = TOPIC + "/keyDeduplication"
NAMESPACE_POLICY = NAMESPACES + "/keyDeduplication"
BROKER_STATS = "/admin/v2/broker-stats/keyDeduplication"


def key_dedup_routes(broker: Broker) -> list[Route]:
    """Registered with ``key_dedup_errors``: a malformed policy is a 400."""
    api = _KeyDedupApi(broker)
    return [
        ("GET", NAMESPACE_POLICY, api.get_namespace),
        ("POST", NAMESPACE_POLICY, api.set_namespace),
        ("DELETE", NAMESPACE_POLICY, api.remove_namespace),
        ("GET", TOPIC_POLICY, api.get_topic),
        ("POST", TOPIC_POLICY, api.set_topic),
        ("DELETE", TOPIC_POLICY, api.remove_topic),
        ("GET", BROKER_STATS, api.broker_stats),
    ]


def key_dedup_errors(handler: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except InvalidKeyDedupPolicyError as exc:
            raise HttpError(400, str(exc)) from None
        except InvalidTopicNameError as exc:
            raise HttpError(412, str(exc)) from None
        except BrokerError as exc:
            raise HttpError(503 if exc.retriable else 412, str(exc)) from None

    return wrapped


def _applied(request: Request) -> bool:
    return request.query.get("applied", ["false"])[-1].lower() in ("true", "1")


class _KeyDedupApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _body(self, request: Request) -> dict[str, object]:
        body = request.json()
        KeyDedupPolicy.from_json(body, self.broker.key_dedup.defaults)  # validates
        assert isinstance(body, dict)
        return body

    async def get_namespace(self, request: Request) -> Response:
        namespace = namespace_of(request)
        value = self.broker.policies.namespace_value(namespace, POLICY)
        if _applied(request):
            defaults = self.broker.key_dedup.defaults
            policy = KeyDedupPolicy.from_json(value, defaults) if value is not None else defaults
            return json_response(policy.to_json())
        return json_response(value)

    async def set_namespace(self, request: Request) -> Response:
        await self.broker.policies.set_namespace_value(
            namespace_of(request), POLICY, self._body(request)
        )
        await self.broker.key_dedup.apply_policies()
        return no_content()

    async def remove_namespace(self, request: Request) -> Response:
        await self.broker.policies.set_namespace_value(namespace_of(request), POLICY, None)
        await self.broker.key_dedup.apply_policies()
        return no_content()

    async def get_topic(self, request: Request) -> Response:
        name = topic_of(request)
        if _applied(request):
            return json_response(self.broker.key_dedup.policy_for(name).to_json())
        return json_response(self.broker.policies.topic_value(name, POLICY))

    async def set_topic(self, request: Request) -> Response:
        await self.broker.policies.set_topic_value(topic_of(request), POLICY, self._body(request))
        await self.broker.key_dedup.apply_policies()
        return no_content()

    async def remove_topic(self, request: Request) -> Response:
        await self.broker.policies.set_topic_value(topic_of(request), POLICY, None)
        await self.broker.key_dedup.apply_policies()
        return no_content()

    async def broker_stats(self, request: Request) -> Response:
        return json_response(self.broker.key_dedup.stats())
