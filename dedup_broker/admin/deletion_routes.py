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
from typing import TYPE_CHECKING

from dedup_broker.admin.http import HttpError, Request, Response, json_response, no_content
from dedup_broker.admin.paths import NAMESPACES, TOPIC, Route, namespace_of, topic_of
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.server.retention import (
    RETENTION,
    InvalidRetentionError,
    parse_retention,
    retention_json,
    topic_retention,
)
from dedup_broker.storage.status import LedgerType
from system_topics.lag import group_lag
from system_topics.topics import DeletionTopics

if TYPE_CHECKING:
    from dedup_broker.server.broker import BrokerService

DELETION = "/admin/v2/ledger-deletion"


def deletion_routes(broker: BrokerService) -> list[Route]:
    api = _DeletionApi(broker)
    return [
        ("GET", NAMESPACES + "/retention", api.get_retention),
        ("POST", NAMESPACES + "/retention", api.set_retention),
        ("DELETE", NAMESPACES + "/retention", api.remove_retention),
        ("POST", TOPIC + "/trim", api.trim_topic),
        ("GET", DELETION + "/ledgers/{ledgerId}", api.ledger_status),
        ("GET", DELETION + "/stats", api.stats),
    ]


class _DeletionApi:
    def __init__(self, broker: BrokerService) -> None:
        self.broker = broker

    def _trim_namespace(self, namespace: str) -> None:
        for topic in list(self.broker.topics.values()):
            if topic.name.namespace_name == namespace:
                topic.managed_ledger.trimmer.trim_soon()

    async def get_retention(self, request: Request) -> Response:
        return json_response(self.broker.policies.namespace_value(namespace_of(request), RETENTION))

    async def set_retention(self, request: Request) -> Response:
        try:
            retention = parse_retention(request.json())
        except InvalidRetentionError as exc:
            raise HttpError(412, str(exc)) from None
        namespace = namespace_of(request)
        await self.broker.policies.set_namespace_value(
            namespace, RETENTION, retention_json(retention)
        )
        self._trim_namespace(namespace)
        return no_content()

    async def remove_retention(self, request: Request) -> Response:
        namespace = namespace_of(request)
        await self.broker.policies.set_namespace_value(namespace, RETENTION, None)
        self._trim_namespace(namespace)
        return no_content()

    async def trim_topic(self, request: Request) -> Response:
        name = topic_of(request)
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        topic = await self.broker.get_topic(name)
        ledger = topic.managed_ledger
        await ledger.trim_consumed_ledgers(topic_retention(self.broker, name, ledger))
        return no_content()

    async def ledger_status(self, request: Request) -> Response:
        name = request.query.get("managedLedger", [""])[-1]
        try:
            ledger_id = int(request.params["ledgerId"])
        except ValueError:
            raise HttpError(400, "ledgerId must be an integer") from None
        if not name:
            raise HttpError(400, "the managedLedger query parameter is required")
        try:
            ledger_type = LedgerType(request.query.get("type", [LedgerType.LEDGER.value])[-1])
        except ValueError:
            raise HttpError(400, "type must be LEDGER or OFFLOAD_LEDGER") from None
        uid = request.query.get("uid", [""])[-1]
        status = await self.broker.storage.ledger_status(name, ledger_id, ledger_type, uid)
        return json_response({"managedLedger": name, "ledgerId": ledger_id, "status": status.value})

    async def stats(self, request: Request) -> Response:
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
