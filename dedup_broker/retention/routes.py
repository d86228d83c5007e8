"""Admin routes of retention.

- ``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/retention`` (Pulsar's shape)
- ``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/trim`` (Pulsar's trimTopic)
"""

from __future__ import annotations

from aiohttp import web

from dedup_broker.domain.broker import Broker
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.http.bodies import json_response, no_content, read_json
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.retention.policy import (
    RETENTION,
    parse_retention,
    retention_json,
    topic_retention,
)


def retention_routes(broker: Broker) -> list[web.RouteDef]:
    """An invalid retention policy is a broker ``PermanentError``: 412."""
    api = _RetentionApi(broker)
    return [
        web.get(NAMESPACES + "/retention", api.get_retention),
        web.post(NAMESPACES + "/retention", api.set_retention),
        web.delete(NAMESPACES + "/retention", api.remove_retention),
        web.post(TOPIC + "/trim", api.trim_topic),
    ]


class _RetentionApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _trim_namespace(self, namespace: str) -> None:
        for topic in list(self.broker.topics.values()):
            if topic.name.namespace_name == namespace:
                topic.managed_ledger.trimmer.trim_soon()

    async def get_retention(self, request: web.Request) -> web.Response:
        return json_response(self.broker.policies.namespace_value(namespace_of(request), RETENTION))

    async def set_retention(self, request: web.Request) -> web.Response:
        retention = parse_retention(await read_json(request))
        namespace = namespace_of(request)
        await self.broker.policies.set_namespace_value(
            namespace, RETENTION, retention_json(retention)
        )
        self._trim_namespace(namespace)
        return no_content()

    async def remove_retention(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        await self.broker.policies.set_namespace_value(namespace, RETENTION, None)
        self._trim_namespace(namespace)
        return no_content()

    async def trim_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        self.broker.check_served(name)
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        topic = await self.broker.get_topic(name)
        ledger = topic.managed_ledger
        await ledger.trim_consumed_ledgers(
            topic_retention(self.broker.policies, self.broker.config, name, ledger)
        )
        return no_content()
