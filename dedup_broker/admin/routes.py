"""The admin REST API, shaped like Pulsar's ``/admin/v2`` so existing habits and tools work."""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from dedup_broker.admin.bodies import json_response, no_content, read_bool, read_int
from dedup_broker.admin.deletion_routes import deletion_routes
from dedup_broker.admin.errors import BROKER_ERROR_STATUSES, ErrorStatuses, HttpError
from dedup_broker.admin.key_dedup_routes import KEY_DEDUP_ERROR_STATUSES, key_dedup_routes
from dedup_broker.admin.offload_routes import OFFLOAD_ERROR_STATUSES, offload_routes
from dedup_broker.admin.paths import NAMESPACES, TOPIC, namespace_of, query_flag, topic_of
from dedup_broker.admin.serving import new_app
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.metrics_registry import CONTENT_TYPE
from dedup_broker.server.broker import TopicBusyError, TopicExistsError
from dedup_broker.server.policies import DEDUP
from dedup_broker.server.policies import DEDUP_SNAPSHOT_INTERVAL as SNAPSHOT_POLICY
from dedup_broker.server.topic import ConsumerStillConnectedError
from dedup_broker.server.topic_name import TopicName

if TYPE_CHECKING:
    from dedup_broker.server.broker import BrokerService
    from dedup_broker.server.topic import Topic

NAMESPACE = "/admin/v2/persistent/{tenant}/{namespace}"
SNAPSHOT_INTERVAL = "/deduplicationSnapshotInterval"

ADMIN_ERROR_STATUSES: ErrorStatuses = {
    **BROKER_ERROR_STATUSES,
    TopicExistsError: HTTPStatus.CONFLICT,
    TopicBusyError: HTTPStatus.CONFLICT,
    ConsumerStillConnectedError: HTTPStatus.CONFLICT,
    **KEY_DEDUP_ERROR_STATUSES,
    **OFFLOAD_ERROR_STATUSES,
}
"""How every admin route's failures are answered (see ``dedup_broker.admin.errors``)."""


def admin_app(broker: BrokerService) -> web.Application:
    """The broker's whole admin surface, ready for ``serving.start_http``."""
    return new_app(admin_routes(broker), ADMIN_ERROR_STATUSES)


def admin_routes(broker: BrokerService) -> list[web.RouteDef]:
    """Topics, deduplication and metrics routes, plus each feature's own routes."""
    api = AdminApi(broker)
    routes = [
        web.get("/metrics", api.metrics),
        web.get("/admin/v2/brokers/health", api.health),
        web.get(NAMESPACE, api.list_topics),
        web.get(NAMESPACE + "/partitioned", api.list_partitioned_topics),
        web.put(TOPIC, api.create_topic),
        web.delete(TOPIC, api.delete_topic),
        web.put(TOPIC + "/partitions", api.create_partitioned_topic),
        web.post(TOPIC + "/partitions", api.update_partitioned_topic),
        web.get(TOPIC + "/partitions", api.get_partitioned_metadata),
        web.delete(TOPIC + "/partitions", api.delete_partitioned_topic),
        web.get(TOPIC + "/stats", api.stats),
        web.get(TOPIC + "/internalStats", api.internal_stats),
        web.get(TOPIC + "/partitioned-stats", api.partitioned_stats),
        web.get(TOPIC + "/subscriptions", api.list_subscriptions),
        web.delete(TOPIC + "/subscription/{subscription}", api.delete_subscription),
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
    return routes + deletion_routes(broker) + offload_routes(broker) + key_dedup_routes(broker)


async def _interval_body(request: web.Request) -> int:
    seconds = await read_int(request, "a snapshot interval in seconds")
    if seconds < 0:
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"the snapshot interval must be >= 0 seconds, got {seconds}"
        )
    return seconds


class AdminApi:
    def __init__(self, broker: BrokerService) -> None:
        self.broker = broker

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.broker.metrics.render(), headers={"Content-Type": CONTENT_TYPE}
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok", content_type="text/plain")

    async def list_topics(self, request: web.Request) -> web.Response:
        namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        return json_response(self.broker.topics_of_namespace(namespace))

    async def list_partitioned_topics(self, request: web.Request) -> web.Response:
        namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        return json_response(self.broker.list_partitioned_topics(namespace))

    async def create_topic(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        if self.broker.topic_exists(name) or self.broker.partitions_of(name):
            raise HttpError(HTTPStatus.CONFLICT, f"topic {name} already exists")
        await self.broker.get_topic(name)
        return no_content()

    async def delete_topic(self, request: web.Request) -> web.Response:
        await self.broker.delete_topic(topic_of(request), force=query_flag(request, "force"))
        return no_content()

    async def create_partitioned_topic(self, request: web.Request) -> web.Response:
        await self.broker.create_partitioned_topic(
            topic_of(request), await read_int(request, "a number of partitions")
        )
        return no_content()

    async def update_partitioned_topic(self, request: web.Request) -> web.Response:
        await self.broker.update_partitions(
            topic_of(request), await read_int(request, "a number of partitions")
        )
        return no_content()

    async def get_partitioned_metadata(self, request: web.Request) -> web.Response:
        return json_response({"partitions": self.broker.partitions_of(topic_of(request))})

    async def delete_partitioned_topic(self, request: web.Request) -> web.Response:
        await self.broker.delete_partitioned_topic(
            topic_of(request), force=query_flag(request, "force")
        )
        return no_content()

    async def _loaded(self, name: TopicName) -> Topic:
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.broker.get_topic(name)

    async def stats(self, request: web.Request) -> web.Response:
        topic = await self._loaded(topic_of(request))
        return json_response(topic.stats())

    async def internal_stats(self, request: web.Request) -> web.Response:
        topic = await self._loaded(topic_of(request))
        return json_response(topic.internal_stats())

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        name = topic_of(request)
        partitions = self.broker.partitions_of(name)
        if not partitions:
            raise HttpError(HTTPStatus.NOT_FOUND, f"partitioned topic {name} does not exist")
        result: dict[str, object] = {"metadata": {"partitions": partitions}, "partitions": {}}
        totals = {"msgInCounter": 0, "bytesInCounter": 0, "msgOutCounter": 0}
        per_partition: dict[str, object] = {}
        for index in range(partitions):
            partition = name.partition(index)
            if not self.broker.topic_exists(partition):
                continue
            topic = await self.broker.get_topic(partition)
            stats = topic.stats()
            per_partition[str(partition)] = stats
            for key in totals:
                value = stats.get(key, 0)
                totals[key] += value if isinstance(value, int) else 0
        result.update(totals)
        result["partitions"] = per_partition
        return json_response(result)

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        topic = await self._loaded(topic_of(request))
        return json_response(sorted(topic.subscriptions))

    async def delete_subscription(self, request: web.Request) -> web.Response:
        topic = await self._loaded(topic_of(request))
        name = request.match_info["subscription"]
        subscription = topic.subscriptions.get(name)
        if subscription is not None and subscription.consumers and query_flag(request, "force"):
            for consumer in list(subscription.consumers):
                consumer.connection.close_consumer_by_broker(consumer)
        await topic.unsubscribe(name)
        return no_content()

    # --- deduplication policies (namespace and topic level) ----------------------------
    async def get_namespace_dedup(self, request: web.Request) -> web.Response:
        return json_response(self.broker.policies.namespace_value(namespace_of(request), DEDUP))

    async def set_namespace_dedup(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_namespace_value(
            namespace_of(request), DEDUP, await read_bool(request)
        )
        await self.broker.apply_policies()
        return no_content()

    async def remove_namespace_dedup(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_namespace_value(namespace_of(request), DEDUP, None)
        await self.broker.apply_policies()
        return no_content()

    async def get_topic_dedup(self, request: web.Request) -> web.Response:
        return json_response(self.broker.policies.topic_value(topic_of(request), DEDUP))

    async def set_topic_dedup(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_topic_value(
            topic_of(request), DEDUP, await read_bool(request)
        )
        await self.broker.apply_policies()
        return no_content()

    async def remove_topic_dedup(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_topic_value(topic_of(request), DEDUP, None)
        await self.broker.apply_policies()
        return no_content()

    # --- deduplication snapshot interval (namespace and topic level) -------------------
    async def get_namespace_snapshot_interval(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        return json_response(self.broker.policies.namespace_value(namespace, SNAPSHOT_POLICY))

    async def set_namespace_snapshot_interval(self, request: web.Request) -> web.Response:
        seconds = await _interval_body(request)
        await self.broker.policies.set_namespace_value(
            namespace_of(request), SNAPSHOT_POLICY, seconds
        )
        await self.broker.apply_policies()
        return no_content()

    async def remove_namespace_snapshot_interval(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_namespace_value(namespace_of(request), SNAPSHOT_POLICY, None)
        await self.broker.apply_policies()
        return no_content()

    async def get_topic_snapshot_interval(self, request: web.Request) -> web.Response:
        return json_response(self.broker.policies.topic_value(topic_of(request), SNAPSHOT_POLICY))

    async def set_topic_snapshot_interval(self, request: web.Request) -> web.Response:
        seconds = await _interval_body(request)
        await self.broker.policies.set_topic_value(topic_of(request), SNAPSHOT_POLICY, seconds)
        await self.broker.apply_policies()
        return no_content()

    async def remove_topic_snapshot_interval(self, request: web.Request) -> web.Response:
        await self.broker.policies.set_topic_value(topic_of(request), SNAPSHOT_POLICY, None)
        await self.broker.apply_policies()
        return no_content()
