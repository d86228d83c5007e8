"""Admin routes of PIP-6 deduplication, in Pulsar's REST shape.

- ``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/deduplication`` body
  ``true``/``false``; ``.../{topic}/deduplicationEnabled`` for one topic
- ``POST/GET/DELETE .../deduplicationSnapshotInterval`` body seconds, namespace and topic
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.policies import Policies
from dedup_broker.http.bodies import json_response, no_content, read_bool, read_int
from dedup_broker.http.errors import HttpError
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.pip6.policy import DEDUP
from dedup_broker.pip6.policy import DEDUP_SNAPSHOT_INTERVAL as SNAPSHOT_POLICY

SNAPSHOT_INTERVAL = "/deduplicationSnapshotInterval"


def pip6_routes(policies: Policies, topics: TopicRegistry) -> list[web.RouteDef]:
    """A changed policy applies at once to the loaded ``topics``."""
    api = _DeduplicationApi(policies, topics)
    return [
        web.get(NAMESPACES + "/deduplication", api.get_namespace_dedup),
        web.post(NAMESPACES + "/deduplication", api.set_namespace_dedup),
        web.delete(NAMESPACES + "/deduplication", api.remove_namespace_dedup),
        web.get(TOPIC + "/deduplicationEnabled", api.get_topic_dedup),
        web.post(TOPIC + "/deduplicationEnabled", api.set_topic_dedup),
        web.delete(TOPIC + "/deduplicationEnabled", api.remove_topic_dedup),
        web.get(NAMESPACES + SNAPSHOT_INTERVAL, api.get_namespace_snapshot_interval),
        web.post(NAMESPACES + SNAPSHOT_INTERVAL, api.set_namespace_snapshot_interval),
        web.delete(NAMESPACES + SNAPSHOT_INTERVAL, api.remove_namespace_snapshot_interval),
        web.get(TOPIC + SNAPSHOT_INTERVAL, api.get_topic_snapshot_interval),
        web.post(TOPIC + SNAPSHOT_INTERVAL, api.set_topic_snapshot_interval),
        web.delete(TOPIC + SNAPSHOT_INTERVAL, api.remove_topic_snapshot_interval),
    ]


async def _interval_body(request: web.Request) -> int:
    seconds = await read_int(request, "a snapshot interval in seconds")
    if seconds < 0:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"the snapshot interval must be >= 0 seconds, got {seconds}"
        )
    return seconds


class _DeduplicationApi:
    def __init__(self, policies: Policies, topics: TopicRegistry) -> None:
        self.policies = policies
        self.topics = topics

    # --- deduplication policies (namespace and topic level) ----------------------------
    async def get_namespace_dedup(self, request: web.Request) -> web.Response:
        return json_response(self.policies.namespace_value(namespace_of(request), DEDUP))

    async def set_namespace_dedup(self, request: web.Request) -> web.Response:
        await self.policies.set_namespace_value(
            namespace_of(request), DEDUP, await read_bool(request)
        )
        await self.topics.apply_policies()
        return no_content()

    async def remove_namespace_dedup(self, request: web.Request) -> web.Response:
        await self.policies.set_namespace_value(namespace_of(request), DEDUP, None)
        await self.topics.apply_policies()
        return no_content()

    async def get_topic_dedup(self, request: web.Request) -> web.Response:
        return json_response(self.policies.topic_value(topic_of(request), DEDUP))

    async def set_topic_dedup(self, request: web.Request) -> web.Response:
        await self.policies.set_topic_value(topic_of(request), DEDUP, await read_bool(request))
        await self.topics.apply_policies()
        return no_content()

    async def remove_topic_dedup(self, request: web.Request) -> web.Response:
        await self.policies.set_topic_value(topic_of(request), DEDUP, None)
        await self.topics.apply_policies()
        return no_content()

    # --- deduplication snapshot interval (namespace and topic level) -------------------
    async def get_namespace_snapshot_interval(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        return json_response(self.policies.namespace_value(namespace, SNAPSHOT_POLICY))

    async def set_namespace_snapshot_interval(self, request: web.Request) -> web.Response:
        seconds = await _interval_body(request)
        await self.policies.set_namespace_value(namespace_of(request), SNAPSHOT_POLICY, seconds)
        await self.topics.apply_policies()
        return no_content()

    async def remove_namespace_snapshot_interval(self, request: web.Request) -> web.Response:
        await self.policies.set_namespace_value(namespace_of(request), SNAPSHOT_POLICY, None)
        await self.topics.apply_policies()
        return no_content()

    async def get_topic_snapshot_interval(self, request: web.Request) -> web.Response:
        return json_response(self.policies.topic_value(topic_of(request), SNAPSHOT_POLICY))

    async def set_topic_snapshot_interval(self, request: web.Request) -> web.Response:
        seconds = await _interval_body(request)
        await self.policies.set_topic_value(topic_of(request), SNAPSHOT_POLICY, seconds)
        await self.topics.apply_policies()
        return no_content()

    async def remove_topic_snapshot_interval(self, request: web.Request) -> web.Response:
        await self.policies.set_topic_value(topic_of(request), SNAPSHOT_POLICY, None)
        await self.topics.apply_policies()
        return no_content()
