"""Admin routes of topic compaction (Pulsar's shapes).

- ``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: compact in the
  background (409 while a compaction of the topic runs); on a partitioned topic, every
  partition (each on the broker that serves it)
- ``GET .../{topic}/compaction``: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError"}``;
  on a partitioned topic the worst of its partitions
- ``POST``/``PUT``/``GET``/``DELETE /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold``
  body bytes: the namespace's automatic-compaction threshold (0: off)
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from aiohttp import web

from dedup_broker.compaction.policy import COMPACTION_THRESHOLD
from dedup_broker.compaction.topic import CompactionInProgressError, CompactionStatus
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.http.bodies import json_response, no_content, read_int
from dedup_broker.http.errors import ErrorStatuses
from dedup_broker.http.owners import owner_call
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of

if TYPE_CHECKING:
    from dedup_broker.domain.broker import Broker
    from dedup_broker.domain.names import TopicName


COMPACTION_ERROR_STATUSES: ErrorStatuses = {CompactionInProgressError: HTTPStatus.CONFLICT}
"""A compaction already running is a conflict with the request (Pulsar answers 409)."""

_WORST_FIRST = (
    CompactionStatus.ERROR,
    CompactionStatus.RUNNING,
    CompactionStatus.NOT_RUN,
    CompactionStatus.SUCCESS,
)


def compaction_routes(broker: Broker) -> list[web.RouteDef]:
    api = _CompactionApi(broker)
    return [
        web.put(TOPIC + "/compaction", api.trigger),
        web.get(TOPIC + "/compaction", api.status),
        web.put(NAMESPACES + "/compactionThreshold", api.set_threshold),
        web.post(NAMESPACES + "/compactionThreshold", api.set_threshold),
        web.get(NAMESPACES + "/compactionThreshold", api.get_threshold),
        web.delete(NAMESPACES + "/compactionThreshold", api.remove_threshold),
    ]


class _CompactionApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _partitions(self, name: TopicName) -> list[TopicName]:
        """The topic itself, or the partitions of a partitioned topic."""
        count = self.broker.partitions_of(name)
        if count:
            return [name.partition(index) for index in range(count)]
        self.broker.check_served(name)
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return [name]

    def _served_here(self, name: TopicName) -> bool:
        cluster = self.broker.cluster
        return cluster is None or cluster.owns_slot(cluster.slot_of(name))

    async def trigger(self, request: web.Request) -> web.Response:
        for name in self._partitions(topic_of(request)):
            if self._served_here(name):
                (await self.broker.get_topic(name)).compaction.trigger()
            else:
                await owner_call(self.broker, name, "PUT", "/compaction")
        return no_content()

    async def status(self, request: web.Request) -> web.Response:
        found: list[dict[str, Any]] = []
        for name in self._partitions(topic_of(request)):
            if self._served_here(name):
                compaction = (await self.broker.get_topic(name)).compaction
                found.append(
                    {"status": compaction.status.value, "lastError": compaction.last_error}
                )
            else:
                found.append(await owner_call(self.broker, name, "GET", "/compaction") or {})
        rank = [status.value for status in _WORST_FIRST]
        worst = min(found, key=lambda s: rank.index(s.get("status", "ERROR")))
        return json_response(
            {"status": worst.get("status"), "lastError": worst.get("lastError", "")}
        )

    async def get_threshold(self, request: web.Request) -> web.Response:
        value = self.broker.policies.namespace_value(namespace_of(request), COMPACTION_THRESHOLD)
        if value is None:
            value = self.broker.config.broker_service_compaction_threshold_in_bytes
        return json_response(value)

    async def set_threshold(self, request: web.Request) -> web.Response:
        threshold = await read_int(request, "a number of bytes")
        await self.broker.policies.set_namespace_value(
            namespace_of(request), COMPACTION_THRESHOLD, threshold
        )
        return no_content()

    async def remove_threshold(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_namespace_value(
            namespace_of(request), COMPACTION_THRESHOLD, None
        )
        return no_content()
