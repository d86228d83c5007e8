"""Admin routes of retention.

- ``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/retention`` (Pulsar's shape)
- ``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/trim`` (Pulsar's trimTopic)
"""

from __future__ import annotations

from aiohttp import web

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.policies import Policies
from dedup_broker.http.bodies import json_response, no_content, read_json
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.retention.policy import (
    RETENTION,
    parse_retention,
    retention_json,
    trim_namespace,
    trim_topic,
)


def retention_routes(
    policies: Policies, config: BrokerConfig, topics: TopicRegistry
) -> list[web.RouteDef]:
    """An invalid retention policy is a broker ``PermanentError``: 412."""
    api = _RetentionApi(policies, config, topics)
    return [
        web.get(NAMESPACES + "/retention", api.get_retention),
        web.post(NAMESPACES + "/retention", api.set_retention),
        web.delete(NAMESPACES + "/retention", api.remove_retention),
        web.post(TOPIC + "/trim", api.trim_topic),
    ]


class _RetentionApi:
    def __init__(self, policies: Policies, config: BrokerConfig, topics: TopicRegistry) -> None:
        self.policies = policies
        self.config = config
        self.topics = topics

    async def get_retention(self, request: web.Request) -> web.Response:
        return json_response(self.policies.namespace_value(namespace_of(request), RETENTION))

    async def set_retention(self, request: web.Request) -> web.Response:
        retention = parse_retention(await read_json(request))
        namespace = namespace_of(request)
        await self.policies.set_namespace_value(namespace, RETENTION, retention_json(retention))
        trim_namespace(self.topics.loaded_ledgers(), namespace)
        return no_content()

    async def remove_retention(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        await self.policies.set_namespace_value(namespace, RETENTION, None)
        trim_namespace(self.topics.loaded_ledgers(), namespace)
        return no_content()

    async def trim_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        topic = await self.topics.loaded(name)
        await trim_topic(self.policies, self.config, name, topic.managed_ledger)
        return no_content()
