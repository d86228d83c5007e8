"""Admin routes of topic compaction (Pulsar's shapes).

- ``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: compact in the
  background (409 while a compaction of the topic runs); on a partitioned topic, every
  partition (each on the broker that serves it)
- ``GET .../{topic}/compaction``: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError"}``;
  on a partitioned topic the worst of its partitions
- ``POST``/``PUT``/``GET``/``DELETE /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold``
  body bytes: the namespace's automatic-compaction threshold (0: off; unset: no content)
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web

from dedup_broker.compaction.policy import COMPACTION_THRESHOLD
from dedup_broker.compaction.topic import CompactionInProgressError, CompactionStatus
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.partitioned import PartitionedTopics
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.http.bodies import json_response, no_content, read_int
from dedup_broker.http.errors import ErrorStatuses
from dedup_broker.http.owners import OwnerCalls
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of

COMPACTION_ERROR_STATUSES: ErrorStatuses = {CompactionInProgressError: HTTPStatus.CONFLICT}
"""A compaction already running is a conflict with the request (Pulsar answers 409)."""

_WORST_FIRST = (
    CompactionStatus.ERROR,
    CompactionStatus.RUNNING,
    CompactionStatus.NOT_RUN,
    CompactionStatus.SUCCESS,
)


def compaction_routes(
    policies: Policies,
    config: BrokerConfig,
    topics: TopicRegistry,
    partitioned: PartitionedTopics,
    owners: OwnerCalls,
) -> list[web.RouteDef]:
    """A partitioned topic's partitions served elsewhere are asked through ``owners``."""
    api = _CompactionApi(policies, config, topics, partitioned, owners)
    return [
        web.put(TOPIC + "/compaction", api.trigger),
        web.get(TOPIC + "/compaction", api.status),
        web.put(NAMESPACES + "/compactionThreshold", api.set_threshold),
        web.post(NAMESPACES + "/compactionThreshold", api.set_threshold),
        web.get(NAMESPACES + "/compactionThreshold", api.get_threshold),
        web.delete(NAMESPACES + "/compactionThreshold", api.remove_threshold),
    ]


class _CompactionApi:
    def __init__(
        self,
        policies: Policies,
        config: BrokerConfig,
        topics: TopicRegistry,
        partitioned: PartitionedTopics,
        owners: OwnerCalls,
    ) -> None:
        self.policies = policies
        self.config = config
        self.topics = topics
        self.partitioned = partitioned
        self.owners = owners

    def _partitions(self, name: TopicName) -> list[TopicName]:
        """The topic itself, or the partitions of a partitioned topic."""
        count = self.partitioned.partitions_of(name)
        if count:
            return [name.partition(index) for index in range(count)]
        self.topics.check_served(name)
        if not self.topics.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return [name]

    async def trigger(self, request: web.Request) -> web.Response:
        for name in self._partitions(topic_of(request)):
            if self.topics.serves(name):
                (await self.topics.get_topic(name)).compaction.trigger()
            else:
                await self.owners.call(name, "PUT", "/compaction")
        return no_content()

    async def status(self, request: web.Request) -> web.Response:
        found: list[dict[str, Any]] = []
        for name in self._partitions(topic_of(request)):
            if self.topics.serves(name):
                compaction = (await self.topics.get_topic(name)).compaction
                found.append(
                    {"status": compaction.status.value, "lastError": compaction.last_error}
                )
            else:
                found.append(await self.owners.call(name, "GET", "/compaction") or {})
        rank = [status.value for status in _WORST_FIRST]
        worst = min(found, key=lambda s: rank.index(s.get("status", "ERROR")))
        return json_response(
            {"status": worst.get("status"), "lastError": worst.get("lastError", "")}
        )

    async def get_threshold(self, request: web.Request) -> web.Response:
        """The namespace's threshold; no content while it sets none (as Pulsar answers:
        the broker's ``brokerServiceCompactionThresholdInBytes`` applies then)."""
        value = self.policies.namespace_value(namespace_of(request), COMPACTION_THRESHOLD)
        return no_content() if value is None else json_response(value)

    async def set_threshold(self, request: web.Request) -> web.Response:
        threshold = await read_int(request, "a number of bytes")
        await self.policies.set_namespace_value(
            namespace_of(request), COMPACTION_THRESHOLD, threshold
        )
        return no_content()

    async def remove_threshold(self, request: web.Request) -> web.Response:
        await self.policies.set_namespace_value(namespace_of(request), COMPACTION_THRESHOLD, None)
        return no_content()
