"""The admin REST API, shaped like Pulsar's ``/admin/v2`` so existing habits and tools work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dedup_broker.admin.deletion_routes import deletion_routes
from dedup_broker.admin.http import (
    Handler,
    HttpError,
    Request,
    Response,
    Router,
    json_response,
    no_content,
    text_response,
)
from dedup_broker.admin.key_dedup_routes import key_dedup_errors, key_dedup_routes
from dedup_broker.admin.offload_routes import offload_routes
from dedup_broker.admin.paths import NAMESPACES, TOPIC, Route, namespace_of, register, topic_of
from dedup_broker.errors import BrokerError, InvalidTopicNameError, TopicNotFoundError
from dedup_broker.metrics_registry import CONTENT_TYPE
from dedup_broker.server.policies import DEDUP
from dedup_broker.server.policies import DEDUP_SNAPSHOT_INTERVAL as SNAPSHOT_POLICY
from dedup_broker.server.topic_name import TopicName

if TYPE_CHECKING:
    from dedup_broker.server.broker import BrokerService
    from dedup_broker.server.topic import Topic

NAMESPACE = "/admin/v2/persistent/{tenant}/{namespace}"
SNAPSHOT_INTERVAL = "/deduplicationSnapshotInterval"


def build_router(broker: BrokerService) -> Router:
    api = AdminApi(broker)
    router = Router()
    routes: list[Route] = [
        ("GET", "/metrics", api.metrics),
        ("GET", "/admin/v2/brokers/health", api.health),
        ("GET", NAMESPACE, api.list_topics),
        ("GET", NAMESPACE + "/partitioned", api.list_partitioned_topics),
        ("PUT", TOPIC, api.create_topic),
        ("DELETE", TOPIC, api.delete_topic),
        ("PUT", TOPIC + "/partitions", api.create_partitioned_topic),
        ("POST", TOPIC + "/partitions", api.update_partitioned_topic),
        ("GET", TOPIC + "/partitions", api.get_partitioned_metadata),
        ("DELETE", TOPIC + "/partitions", api.delete_partitioned_topic),
        ("GET", TOPIC + "/stats", api.stats),
        ("GET", TOPIC + "/internalStats", api.internal_stats),
        ("GET", TOPIC + "/partitioned-stats", api.partitioned_stats),
        ("GET", TOPIC + "/subscriptions", api.list_subscriptions),
        ("DELETE", TOPIC + "/subscription/{subscription}", api.delete_subscription),
        ("GET", NAMESPACES + "/deduplication", api.get_namespace_dedup),
        ("POST", NAMESPACES + "/deduplication", api.set_namespace_dedup),
        ("DELETE", NAMESPACES + "/deduplication", api.remove_namespace_dedup),
        ("GET", TOPIC + "/deduplicationEnabled", api.get_topic_dedup),
        ("POST", TOPIC + "/deduplicationEnabled", api.set_topic_dedup),
        ("DELETE", TOPIC + "/deduplicationEnabled", api.remove_topic_dedup),
        ("GET", NAMESPACES + SNAPSHOT_INTERVAL, api.get_namespace_snapshot_interval),
        ("POST", NAMESPACES + SNAPSHOT_INTERVAL, api.set_namespace_snapshot_interval),
        ("DELETE", NAMESPACES + SNAPSHOT_INTERVAL, api.remove_namespace_snapshot_interval),
        ("GET", TOPIC + SNAPSHOT_INTERVAL, api.get_topic_snapshot_interval),
        ("POST", TOPIC + SNAPSHOT_INTERVAL, api.set_topic_snapshot_interval),
        ("DELETE", TOPIC + SNAPSHOT_INTERVAL, api.remove_topic_snapshot_interval),
    ]
    routes += deletion_routes(broker) + offload_routes(broker)
    register(router, routes, _translating_errors)
    register(router, key_dedup_routes(broker), key_dedup_errors)
    return router


def _translating_errors(handler: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except (TopicNotFoundError, _NotFoundError) as exc:
            raise HttpError(404, str(exc)) from None
        except InvalidTopicNameError as exc:
            raise HttpError(412, str(exc)) from None
        except BrokerError as exc:
            if exc.retriable:
                raise HttpError(503, str(exc)) from None
            status = 409 if type(exc).__name__ in _CONFLICTS else 412
            raise HttpError(status, str(exc)) from None

    return wrapped


_CONFLICTS = {"TopicExistsError", "TopicBusyError", "ConsumerStillConnectedError"}


class _NotFoundError(BrokerError):
    pass


def _flag(request: Request, name: str) -> bool:
    return request.query.get(name, ["false"])[-1].lower() in ("true", "1", "yes")


def _bool_body(request: Request) -> bool:
    text = request.text().strip().lower()
    if text not in ("true", "false"):
        raise HttpError(400, f"expected true or false as the body, got {text!r}")
    return text == "true"


def _int_body(request: Request, what: str = "a number of partitions") -> int:
    text = request.text().strip()
    try:
        return int(text)
    except ValueError:
        raise HttpError(400, f"expected {what} as the body, got {text!r}") from None


def _interval_body(request: Request) -> int:
    seconds = _int_body(request, "a snapshot interval in seconds")
    if seconds < 0:
        raise HttpError(400, f"the snapshot interval must be >= 0 seconds, got {seconds}")
    return seconds


class AdminApi:
    def __init__(self, broker: BrokerService) -> None:
        self.broker = broker

    async def metrics(self, request: Request) -> Response:
        return text_response(self.broker.metrics.render().decode(), content_type=CONTENT_TYPE)

    async def health(self, request: Request) -> Response:
        return text_response("ok", content_type="text/plain")

    async def list_topics(self, request: Request) -> Response:
        namespace = f"{request.params['tenant']}/{request.params['namespace']}"
        return json_response(self.broker.topics_of_namespace(namespace))

    async def list_partitioned_topics(self, request: Request) -> Response:
        namespace = f"{request.params['tenant']}/{request.params['namespace']}"
        return json_response(self.broker.list_partitioned_topics(namespace))

    async def create_topic(self, request: Request) -> Response:
        name = topic_of(request)
        if self.broker.topic_exists(name) or self.broker.partitions_of(name):
            raise HttpError(409, f"topic {name} already exists")
        await self.broker.get_topic(name)
        return no_content()

    async def delete_topic(self, request: Request) -> Response:
        await self.broker.delete_topic(topic_of(request), force=_flag(request, "force"))
        return no_content()

    async def create_partitioned_topic(self, request: Request) -> Response:
        await self.broker.create_partitioned_topic(topic_of(request), _int_body(request))
        return no_content()

    async def update_partitioned_topic(self, request: Request) -> Response:
        await self.broker.update_partitions(topic_of(request), _int_body(request))
        return no_content()

    async def get_partitioned_metadata(self, request: Request) -> Response:
        return json_response({"partitions": self.broker.partitions_of(topic_of(request))})

    async def delete_partitioned_topic(self, request: Request) -> Response:
        await self.broker.delete_partitioned_topic(topic_of(request), force=_flag(request, "force"))
        return no_content()

    async def _loaded(self, name: TopicName) -> Topic:
        if not self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.broker.get_topic(name)

    async def stats(self, request: Request) -> Response:
        topic = await self._loaded(topic_of(request))
        return json_response(topic.stats())

    async def internal_stats(self, request: Request) -> Response:
        topic = await self._loaded(topic_of(request))
        return json_response(topic.internal_stats())

    async def partitioned_stats(self, request: Request) -> Response:
        name = topic_of(request)
        partitions = self.broker.partitions_of(name)
        if not partitions:
            raise _NotFoundError(f"partitioned topic {name} does not exist")
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

    async def list_subscriptions(self, request: Request) -> Response:
        topic = await self._loaded(topic_of(request))
        return json_response(sorted(topic.subscriptions))

    async def delete_subscription(self, request: Request) -> Response:
        topic = await self._loaded(topic_of(request))
        name = request.params["subscription"]
        subscription = topic.subscriptions.get(name)
        if subscription is not None and subscription.consumers and _flag(request, "force"):
            for consumer in list(subscription.consumers):
                consumer.connection.close_consumer_by_broker(consumer)
        await topic.unsubscribe(name)
        return no_content()

    # --- deduplication policies (namespace and topic level) ----------------------------
    async def get_namespace_dedup(self, request: Request) -> Response:
        return json_response(self.broker.policies.namespace_value(namespace_of(request), DEDUP))

    async def set_namespace_dedup(self, request: Request) -> Response:
        await self.broker.policies.set_namespace_value(
            namespace_of(request), DEDUP, _bool_body(request)
        )
        await self.broker.apply_policies()
        return no_content()

    async def remove_namespace_dedup(self, request: Request) -> Response:
        await self.broker.policies.set_namespace_value(namespace_of(request), DEDUP, None)
        await self.broker.apply_policies()
        return no_content()

    async def get_topic_dedup(self, request: Request) -> Response:
        return json_response(self.broker.policies.topic_value(topic_of(request), DEDUP))

    async def set_topic_dedup(self, request: Request) -> Response:
        await self.broker.policies.set_topic_value(topic_of(request), DEDUP, _bool_body(request))
        await self.broker.apply_policies()
        return no_content()

    async def remove_topic_dedup(self, request: Request) -> Response:
        await self.broker.policies.set_topic_value(topic_of(request), DEDUP, None)
        await self.broker.apply_policies()
        return no_content()

    # --- deduplication snapshot interval (namespace and topic level) -------------------
    async def get_namespace_snapshot_interval(self, request: Request) -> Response:
        namespace = namespace_of(request)
        return json_response(self.broker.policies.namespace_value(namespace, SNAPSHOT_POLICY))

    async def set_namespace_snapshot_interval(self, request: Request) -> Response:
        seconds = _interval_body(request)
        await self.broker.policies.set_namespace_value(
            namespace_of(request), SNAPSHOT_POLICY, seconds
        )
        await self.broker.apply_policies()
        return no_content()

    async def remove_namespace_snapshot_interval(self, request: Request) -> Response:
        await self.broker.policies.set_namespace_value(namespace_of(request), SNAPSHOT_POLICY, None)
        await self.broker.apply_policies()
        return no_content()

    async def get_topic_snapshot_interval(self, request: Request) -> Response:
        return json_response(self.broker.policies.topic_value(topic_of(request), SNAPSHOT_POLICY))

    async def set_topic_snapshot_interval(self, request: Request) -> Response:
        seconds = _interval_body(request)
        await self.broker.policies.set_topic_value(topic_of(request), SNAPSHOT_POLICY, seconds)
        await self.broker.apply_policies()
        return no_content()

    async def remove_topic_snapshot_interval(self, request: Request) -> Response:
        await self.broker.policies.set_topic_value(topic_of(request), SNAPSHOT_POLICY, None)
        await self.broker.apply_policies()
        return no_content()
