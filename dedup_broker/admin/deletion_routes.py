"""Admin routes of retention and two-phase ledger deletion.

- ``POST/GET/DELETE /admin/v2/namespaces/{tenant}/{namespace}/retention`` (Pulsar's shape)
- ``POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/trim`` (Pulsar's trimTopic)
- ``GET /admin/v2/ledger-deletion/ledgers/{ledgerId}?managedLedger=...[&type=OFFLOAD_LEDGER
  &uid=...]``: may a worker delete this ledger's Kafka copy (or offloaded copy ``uid``)?
  ``in-use``, ``pending`` (ask again later) or ``deletable``
- ``GET /admin/v2/ledger-deletion/stats``: estimated deletions in flight
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from dedup_broker.admin.bodies import json_response, no_content, read_json
from dedup_broker.admin.errors import HttpError
from dedup_broker.admin.paths import NAMESPACES, TOPIC, namespace_of, query_value, topic_of
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.server.retention import (
    RETENTION,
    parse_retention,
    retention_json,
    topic_retention,
)
from system_topics.lag import group_lag
from system_topics.topics import DeletionTopics

if TYPE_CHECKING:
    from dedup_broker.server.broker import BrokerService

DELETION = "/admin/v2/ledger-deletion"


def deletion_routes(broker: BrokerService) -> list[web.RouteDef]:
    """An invalid retention policy is a broker ``PermanentError``: 412."""
    api = _DeletionApi(broker)
    return [
        web.get(NAMESPACES + "/retention", api.get_retention),
        web.post(NAMESPACES + "/retention", api.set_retention),
        web.delete(NAMESPACES + "/retention", api.remove_retention),
        web.post(TOPIC + "/trim", api.trim_topic),
        web.get(DELETION + "/ledgers/{ledgerId}", api.ledger_status),
        web.get(DELETION + "/stats", api.stats),
    ]


class _DeletionApi:
    def __init__(self, broker: BrokerService) -> None:
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
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        topic = await self.broker.get_topic(name)
        ledger = topic.managed_ledger
        await ledger.trim_consumed_ledgers(topic_retention(self.broker, name, ledger))
        return no_content()

    async def ledger_status(self, request: web.Request) -> web.Response:
        name = query_value(request, "managedLedger")
        try:
            ledger_id = int(request.match_info["ledgerId"])
        except ValueError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "ledgerId must be an integer") from None
        if not name:
            raise HttpError(HTTPStatus.BAD_REQUEST, "the managedLedger query parameter is required")
        ledger_type = query_value(request, "type", "LEDGER")
        uid = query_value(request, "uid")
        status = await self.broker.storage.ledger_status(name, ledger_id, ledger_type, uid)
        return json_response({"managedLedger": name, "ledgerId": ledger_id, "status": status})

    async def stats(self, request: web.Request) -> web.Response:
        config = self.broker.config
        topics = DeletionTopics.from_config(config)
        lag = await asyncio.to_thread(group_lag, config.kafka_bootstrap_servers, topics)
        return json_response(
            {
                "twoPhaseDeletionEnabled": config.topic_two_phase_deletion_enabled,
                "estimatedInFlightDeletions": sum(lag.values()),
                "lag": lag,
            }
        )
