"""Admin routes of Pulsar's topic and namespace policies (``domain_base.topic_policies``).

For each policy, in Pulsar's REST shape:

- ``GET/POST/PUT/DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/<name>`` (e.g.
  ``maxUnackedMessagesOnConsumer``, ``retention``, ``schemaCompatibilityStrategy``, which
  Pulsar sets with ``PUT``): the topic's value (no content when it has none;
  ``?applied=true``: the one that applies, the namespace's or the broker's when the topic
  has none). A partition is refused (412) and a topic that does not exist is a 404, as
  in Pulsar; a partitioned topic's partitions follow its policies.
- ``GET/POST/DELETE /admin/v2/namespaces/{tenant}/{namespace}/<name>`` (e.g.
  ``maxUnackedMessagesPerConsumer``): the namespace's value.

Bodies are JSON: a number (or the number as a string), or the policy's object; the
topic's ``messageTTL`` also comes as ``?messageTTL=`` (how Pulsar's admin clients send it).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from aiohttp import web

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_policies import (
    POLICIES as DOMAIN_POLICIES,
)
from dedup_broker.domain_base.topic_policies import (
    BadPolicyError,
    Level,
    PolicyOutOfRangeError,
    TopicPolicy,
)
from dedup_broker.http.bodies import json_response, no_content, read_text
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, query_flag, topic_of
from dedup_broker.retention.policy import RETENTION_POLICY
from dedup_broker.schema.registry import TOPIC_POLICIES as SCHEMA_TOPIC_POLICIES
from dedup_broker.tiered.policy import OFFLOAD_POLICIES

POLICIES = (*DOMAIN_POLICIES, RETENTION_POLICY, OFFLOAD_POLICIES, *SCHEMA_TOPIC_POLICIES)
"""The domain's policies and those the features declare."""

TOPIC_POLICY_ERROR_STATUSES: ErrorStatuses = {
    BadPolicyError: HTTPStatus.BAD_REQUEST,
    PolicyOutOfRangeError: HTTPStatus.PRECONDITION_FAILED,
}
"""Pulsar's statuses: a malformed body is a 400, a value out of range a 412."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def topic_policy_routes(
    policies: Policies, config: BrokerConfig, topics: TopicRegistry
) -> list[web.RouteDef]:
    """Failures are answered with ``TOPIC_POLICY_ERROR_STATUSES`` among the app's statuses."""
    api = _TopicPoliciesApi(policies, config, topics)
    routes: list[web.RouteDef] = []
    for policy in POLICIES:
        topic_path = f"{TOPIC}/{policy.topic_route}"
        routes += [
            web.get(topic_path, api.handler(api.get_topic, policy)),
            web.post(topic_path, api.handler(api.set_topic, policy)),
            web.put(topic_path, api.handler(api.set_topic, policy)),
            web.delete(topic_path, api.handler(api.remove_topic, policy)),
        ]
        if policy.namespace_route is not None:
            namespace_path = f"{NAMESPACES}/{policy.namespace_route}"
            routes += [
                web.get(namespace_path, api.handler(api.get_namespace, policy)),
                web.post(namespace_path, api.handler(api.set_namespace, policy)),
                web.delete(namespace_path, api.handler(api.remove_namespace, policy)),
            ]
    return routes


def _answer(value: object) -> web.Response:
    """A value as Pulsar answers it: no content when there is none."""
    return no_content() if value is None else json_response(value)


class _TopicPoliciesApi:
    def __init__(self, policies: Policies, config: BrokerConfig, topics: TopicRegistry) -> None:
        self.policies = policies
        self.config = config
        self.topics = topics

    @staticmethod
    def handler(
        method: Callable[[web.Request, TopicPolicy], Awaitable[web.Response]],
        policy: TopicPolicy,
    ) -> _Handler:
        async def handle(request: web.Request) -> web.Response:
            return await method(request, policy)

        return handle

    def _topic(self, request: web.Request) -> TopicName:
        """The topic named, refused as Pulsar refuses it: a partition (412), or a topic
        that does not exist (404)."""
        name = topic_of(request)
        if name.is_partition:
            raise HttpError(
                HTTPStatus.PRECONDITION_FAILED,
                "Not allowed to set/get topic policy for a partition",
            )
        if not (self.topics.partitions_of(name) or self.topics.topic_exists(name)):
            raise HttpError(HTTPStatus.NOT_FOUND, f"Topic {name} not found")
        return name

    async def _body(self, request: web.Request, policy: TopicPolicy, level: Level) -> object:
        text = (await read_text(request)).strip()
        if level is Level.TOPIC and policy.topic_route == "messageTTL":
            text = request.query.get("messageTTL", text)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # a bare word: the policy says what it expected
        return policy.parse(value, level, self.config)

    # --- topic level ---------------------------------------------------------------
    async def get_topic(self, request: web.Request, policy: TopicPolicy) -> web.Response:
        name = self._topic(request)
        if query_flag(request, "applied"):
            return json_response(policy.applied(self.policies, self.config, name))
        return _answer(self.policies.topic_value(name, policy.stored))

    async def set_topic(self, request: web.Request, policy: TopicPolicy) -> web.Response:
        name = self._topic(request)
        value = await self._body(request, policy, Level.TOPIC)
        await self.policies.set_topic_value(name, policy.stored, value)
        return no_content()

    async def remove_topic(self, request: web.Request, policy: TopicPolicy) -> web.Response:
        await self.policies.set_topic_value(self._topic(request), policy.stored, None)
        return no_content()

    # --- namespace level ----------------------------------------------------------------
    async def get_namespace(self, request: web.Request, policy: TopicPolicy) -> web.Response:
        value = self.policies.namespace_value(namespace_of(request), policy.stored)
        return _answer(policy.namespace_unset if value is None else value)

    async def set_namespace(self, request: web.Request, policy: TopicPolicy) -> web.Response:
        value = await self._body(request, policy, Level.NAMESPACE)
        await self.policies.set_namespace_value(namespace_of(request), policy.stored, value)
        return no_content()

    async def remove_namespace(self, request: web.Request, policy: TopicPolicy) -> web.Response:
        await self.policies.set_namespace_value(namespace_of(request), policy.stored, None)
        return no_content()
