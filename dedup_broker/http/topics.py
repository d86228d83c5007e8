"""Admin routes of topics and namespaces, shaped like Pulsar's ``/admin/v2``.

Topics (create, delete, partitioned metadata, properties, stats, subscriptions) and the
broker's ``/metrics`` and health endpoints; every feature adds its own routes from its
room. A topic's properties are given at creation (``PUT .../{topic}`` with a JSON object,
``PUT .../partitions`` with ``{"partitions", "properties"}``) and through ``GET/PUT
.../properties`` and ``DELETE .../properties?key=``. Stats take Pulsar's
``excludePublishers`` and ``excludeConsumers``.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from aiohttp import web
from prometheus_client import CollectorRegistry

from dedup_broker.cluster.service import NotOwnerError
from dedup_broker.config import BrokerConfig, snake_case
from dedup_broker.domain import partitioned_stats, subscription_admin, topic_stats
from dedup_broker.domain.listing import NamespaceListing
from dedup_broker.domain.partitioned import PartitionedTopics, TopicExistsError
from dedup_broker.domain.registry import TopicBusyError, TopicRegistry
from dedup_broker.domain.subscription_errors import (
    ConsumerStillConnectedError,
    SubscriptionExistsError,
)
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_metadata import (
    created_ms,
    record_creation,
    remove_topic_property,
    topic_properties,
    update_topic_properties,
)
from dedup_broker.http.bodies import json_response, no_content, read_json, read_partitions
from dedup_broker.http.errors import BROKER_ERROR_STATUSES, ErrorStatuses, HttpError
from dedup_broker.http.owners import OwnerCalls
from dedup_broker.http.paths import (
    NAMESPACES,
    TOPIC,
    namespace_of,
    query_flag,
    query_value,
    topic_of,
)
from dedup_broker.metrics_registry import CONTENT_TYPE, exposition_chunks
from dedup_broker.storage.api import Position

NAMESPACE = "/admin/v2/persistent/{tenant}/{namespace}"

TOPIC_ERROR_STATUSES: ErrorStatuses = {
    **BROKER_ERROR_STATUSES,
    TopicExistsError: HTTPStatus.CONFLICT,
    TopicBusyError: HTTPStatus.CONFLICT,
    ConsumerStillConnectedError: HTTPStatus.CONFLICT,
    SubscriptionExistsError: HTTPStatus.CONFLICT,
}


def broker_routes(
    registry: CollectorRegistry, ready: Callable[[], bool] = lambda: True
) -> list[web.RouteDef]:
    """``/metrics`` (Prometheus text format) and ``/admin/v2/brokers/health``: 503 while
    the broker starts (its ports are bound before it owns anything) or shuts down, so that
    probes and load balancers send clients only to a broker that serves."""

    async def metrics(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE})
        await response.prepare(request)
        async for chunk in exposition_chunks(registry):  # the loop serves between chunks
            await response.write(chunk)
        await response.write_eof()
        return response

    async def health(request: web.Request) -> web.Response:
        if not ready():
            return web.json_response(
                {"reason": "the broker is starting or shutting down"},
                status=HTTPStatus.SERVICE_UNAVAILABLE,
            )
        return web.Response(text="ok", content_type="text/plain")

    return [web.get("/metrics", metrics), web.get("/admin/v2/brokers/health", health)]


SECRET_SETTINGS = frozenset(
    {
        "token_secret_key",
        "basic_auth_conf",
        "tls_key_file_path",
        "kafka_sasl_password",
        "kafka_ssl_key_password",
        "broker_client_authentication_parameters",
        "redis_url",
    }
)
"""Settings whose values are not shown: credentials, keys, URLs that may carry a password."""


def configuration_routes(config: BrokerConfig) -> list[web.RouteDef]:
    """``GET /admin/v2/brokers/configuration/runtime``: the settings in effect, under
    Pulsar's names, as strings (secrets shown as ``******``)."""

    async def runtime(request: web.Request) -> web.Response:
        shown: dict[str, str] = {}
        for name, value in config.as_pulsar_names().items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if value is None:
                text = ""
            secret = snake_case(name) in SECRET_SETTINGS
            shown[name] = "******" if secret and text else text
        return json_response(shown)

    return [web.get("/admin/v2/brokers/configuration/runtime", runtime)]


def topic_routes(
    topics: TopicRegistry, namespaces: NamespaceListing, owners: OwnerCalls, policies: Policies
) -> list[web.RouteDef]:
    """Partitions served by other brokers are asked through ``owners``; ``policies`` keep
    the topics' properties."""
    api = _TopicsApi(topics, namespaces, owners, policies)
    return [
        web.get(NAMESPACE, api.list_topics),
        web.get(NAMESPACE + "/partitioned", api.list_partitioned_topics),
        web.get(NAMESPACES + "/topics", api.namespace_topics),
        web.put(TOPIC, api.create_topic),
        web.delete(TOPIC, api.delete_topic),
        *partitioned_topic_routes(topics, namespaces, owners, TOPIC, topic_of, policies),
        web.get(TOPIC + "/properties", api.get_properties),
        web.put(TOPIC + "/properties", api.update_properties),
        web.delete(TOPIC + "/properties", api.remove_property),
        web.post(TOPIC + "/partitions", api.update_partitioned_topic),
        web.get(TOPIC + "/stats", api.stats),
        web.get(TOPIC + "/internalStats", api.internal_stats),
        web.get(TOPIC + "/lastMessageId", api.last_message_id),
        web.get(TOPIC + "/partitioned-stats", api.partitioned_stats),
        web.get(TOPIC + "/subscriptions", api.list_subscriptions),
        web.delete(TOPIC + "/subscription/{subscription}", api.delete_subscription),
        web.put(TOPIC + "/subscription/{subscription}", api.create_subscription),
    ]


def partitioned_topic_routes(
    topics: TopicRegistry,
    namespaces: NamespaceListing,
    owners: OwnerCalls,
    path: str,
    name_of: Callable[[web.Request], TopicName],
    policies: Policies | None = None,
) -> list[web.RouteDef]:
    """Create, read and delete the partitioned-topic metadata of ``{path}/partitions``
    (``name_of`` reads the topic from the path, of either domain); ``policies``: where a
    created topic's properties and creation time are kept."""
    api = _PartitionedApi(topics, namespaces.partitioned, owners, name_of, policies)
    return [
        web.put(path + "/partitions", api.create),
        web.get(path + "/partitions", api.get),
        web.delete(path + "/partitions", api.delete),
    ]


class _PartitionedApi:
    def __init__(
        self,
        topics: TopicRegistry,
        partitioned: PartitionedTopics,
        owners: OwnerCalls,
        name_of: Callable[[web.Request], TopicName],
        policies: Policies | None,
    ) -> None:
        self.topics = topics
        self.partitioned = partitioned
        self.owners = owners
        self.name_of = name_of
        self.policies = policies

    async def create(self, request: web.Request) -> web.Response:
        name = self.name_of(request)
        await self.partitioned.create_partitioned_topic(name, await read_partitions(request))
        if self.policies is not None:
            body = await read_json(request)
            given = body.get("properties") if isinstance(body, dict) else None
            await record_creation(self.policies, name, _properties(given))
        return no_content()

    async def get(self, request: web.Request) -> web.Response:
        partitions = await self.partitioned.partitioned_metadata(self.name_of(request))
        return json_response({"partitions": partitions})

    async def delete(self, request: web.Request) -> web.Response:
        async def on_owner(partition: TopicName, force: bool) -> None:
            await self.owners.call(partition, "DELETE", query=f"force={str(force).lower()}")

        await self.topics.delete_partitioned_topic(
            self.name_of(request), force=query_flag(request, "force"), elsewhere=on_owner
        )
        return no_content()


class _TopicsApi:
    def __init__(
        self,
        topics: TopicRegistry,
        namespaces: NamespaceListing,
        owners: OwnerCalls,
        policies: Policies,
    ) -> None:
        self.topics = topics
        self.namespaces = namespaces
        self.partitioned = namespaces.partitioned
        self.owners = owners
        self.policies = policies

    async def list_topics(self, request: web.Request) -> web.Response:
        namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        await self.namespaces.refresh_listing()
        return json_response(self.namespaces.topics_of_namespace(namespace))

    async def namespace_topics(self, request: web.Request) -> web.Response:
        """Pulsar's ``GET /admin/v2/namespaces/{tenant}/{namespace}/topics``: the
        persistent topics (partitions listed one by one) for ``mode=PERSISTENT`` (the
        default) or ``ALL``, and the non-persistent ones live here for ``NON_PERSISTENT``
        or ``ALL``."""
        namespace = namespace_of(request)
        mode = query_value(request, "mode", "PERSISTENT").upper()
        topics: list[str] = []
        if mode != "NON_PERSISTENT":
            topics = await self.namespaces.current_topics_of_namespace(namespace)
        if mode != "PERSISTENT":
            topics += self.topics.non_persistent_topics_of_namespace(namespace)
        return json_response(topics)

    async def list_partitioned_topics(self, request: web.Request) -> web.Response:
        namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        await self.namespaces.refresh_listing()
        return json_response(self.partitioned.list_partitioned_topics(namespace))

    async def create_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        self.topics.check_served(name)
        if self.topics.topic_exists(name) or self.partitioned.partitions_of(name):
            raise HttpError(HTTPStatus.CONFLICT, f"topic {name} already exists")
        given = await read_json(request) if (await request.read()).strip() else None
        await self.topics.get_topic(name)
        if not name.is_partition:
            await record_creation(self.policies, name, _properties(given))
        return no_content()

    def _existing(self, name: TopicName) -> TopicName:
        if not (self.partitioned.partitions_of(name) or self.topics.topic_exists(name)):
            raise HttpError(HTTPStatus.NOT_FOUND, f"Topic {name} not found")
        return name

    async def get_properties(self, request: web.Request) -> web.Response:
        name = self._existing(topic_of(request))
        return json_response(topic_properties(self.policies, name))

    async def update_properties(self, request: web.Request) -> web.Response:
        name = self._existing(topic_of(request))
        given = _properties(await read_json(request)) or {}
        await update_topic_properties(self.policies, name, given)
        return no_content()

    async def remove_property(self, request: web.Request) -> web.Response:
        name = self._existing(topic_of(request))
        await remove_topic_property(self.policies, name, query_value(request, "key"))
        return no_content()

    async def delete_topic(self, request: web.Request) -> web.Response:
        await self.topics.delete_topic(topic_of(request), force=query_flag(request, "force"))
        return no_content()

    async def update_partitioned_topic(self, request: web.Request) -> web.Response:
        await self.partitioned.update_partitions(topic_of(request), await read_partitions(request))
        return no_content()

    async def stats(self, request: web.Request) -> web.Response:
        topic = await self.topics.loaded(topic_of(request))
        return json_response(_shown(request, topic.stats()))

    async def internal_stats(self, request: web.Request) -> web.Response:
        topic = await self.topics.loaded(topic_of(request))
        return json_response(topic_stats.internal_stats(topic))

    async def last_message_id(self, request: web.Request) -> web.Response:
        """As Pulsar's: the last stored message (entry id -1 when the topic is empty)."""
        name = topic_of(request)
        topic = await self.topics.loaded(name)
        position, batch_index = await topic.last_message_id()
        return json_response(
            {
                "ledgerId": position.ledger_id,
                "entryId": position.entry_id,
                "partitionIndex": name.partition_index,
                "batchIndex": batch_index,
            }
        )

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        partitions = self.partitioned.partitions_of(name)
        if not partitions:
            raise HttpError(HTTPStatus.NOT_FOUND, f"partitioned topic {name} does not exist")
        per_partition: dict[str, dict[str, Any]] = {}
        for index in range(partitions):
            partition = name.partition(index)
            stats = await self._partition_stats(partition)
            if stats is not None:
                per_partition[str(partition)] = stats
        result = partitioned_stats.aggregate(per_partition.values())
        created = created_ms(self.policies, name)
        if created is not None:
            result["topicCreationTimeStamp"] = created
        result["metadata"] = {"partitions": partitions}
        # Pulsar's default; pulsar-admin asks for them with --per-partition only.
        shown = query_value(request, "perPartition", "true").lower() != "false"
        result["partitions"] = (
            {key: _shown(request, stats) for key, stats in per_partition.items()} if shown else {}
        )
        return json_response(_shown(request, result))

    async def _partition_stats(self, partition: TopicName) -> dict[str, Any] | None:
        """A partition's stats, from the broker serving it."""
        try:
            self.topics.check_served(partition)
        except NotOwnerError:
            stats = await self.owners.call(partition, "GET", "/stats")
            return dict(stats) if isinstance(stats, dict) else None
        if not self.topics.topic_exists(partition):
            return None
        return (await self.topics.get_topic(partition)).stats()

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        topic = await self.topics.loaded(topic_of(request))
        return json_response(sorted(topic.subscriptions))

    async def create_subscription(self, request: web.Request) -> web.Response:
        """Body: a message id (``{"ledgerId": L, "entryId": E}``; Pulsar's earliest and
        latest ids too), or none for the end of the topic."""
        name = topic_of(request)
        body = await request.read()
        start: Position | None = None
        if body.strip() and body.strip() != b"null":
            start = _message_id(await read_json(request))
        subscription = request.match_info["subscription"]
        partitions = self.partitioned.partitions_of(name)
        if not partitions:  # on a partitioned topic: on each partition, as Pulsar does
            self.topics.check_served(name)
            await subscription_admin.create_subscription(
                await self.topics.get_topic(name), subscription, start
            )
        for partition in (name.partition(index) for index in range(partitions)):
            if self.topics.serves(partition):
                topic = await self.topics.get_topic(partition)
                await subscription_admin.create_subscription(topic, subscription, start)
            else:
                path = f"/subscription/{quote(subscription, safe='')}"
                await self.owners.call(partition, "PUT", path, body=body)
        return no_content()

    async def delete_subscription(self, request: web.Request) -> web.Response:
        topic = await self.topics.loaded(topic_of(request))
        name = request.match_info["subscription"]
        subscription = topic.subscriptions.get(name)
        if subscription is not None and subscription.consumers and query_flag(request, "force"):
            for consumer in list(subscription.consumers):
                subscription.disconnect(consumer)
        await topic.unsubscribe(name)
        return no_content()


def _properties(body: object) -> dict[str, str] | None:
    """Topic properties: a JSON object of strings (or nothing)."""
    if body is None:
        return None
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"expected properties as strings, got {body!r}")
    return {str(key): value for key, value in body.items()}


def _shown(request: web.Request, stats: dict[str, Any]) -> dict[str, Any]:
    """Stats without publishers (``excludePublishers``) or consumers
    (``excludeConsumers``), as Pulsar leaves them out when asked."""
    if query_flag(request, "excludePublishers"):
        stats = {**stats, "publishers": []}
    if query_flag(request, "excludeConsumers"):
        subscriptions = stats.get("subscriptions")
        if isinstance(subscriptions, dict):
            stats = {
                **stats,
                "subscriptions": {
                    name: {**each, "consumers": []} if isinstance(each, dict) else each
                    for name, each in subscriptions.items()
                },
            }
    return stats


def _message_id(body: object) -> Position:
    if not isinstance(body, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, 'expected a message id: {"ledgerId", "entryId"}')
    try:
        return Position(int(body["ledgerId"]), int(body["entryId"]))
    except (KeyError, TypeError, ValueError):
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"expected a message id with ledgerId and entryId, got {body}"
        ) from None
