"""Admin routes of non-persistent topics, shaped like Pulsar's ``/admin/v2/non-persistent``:
the live topics of a namespace, a topic's stats and subscriptions, creating and deleting
one, and partitioned non-persistent topics (their metadata is stored like a persistent
partitioned topic's; their partitions live in memory)."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from dedup_broker.domain.listing import NamespaceListing
from dedup_broker.domain.non_persistent.topic import NonPersistentTopic
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.names import TopicDomain, TopicName
from dedup_broker.errors import TopicNotFoundError
from dedup_broker.http.bodies import json_response, no_content
from dedup_broker.http.errors import HttpError
from dedup_broker.http.owners import OwnerCalls
from dedup_broker.http.paths import namespace_of, query_flag
from dedup_broker.http.topics import partitioned_topic_routes

NAMESPACE = "/admin/v2/non-persistent/{tenant}/{namespace}"
TOPIC = NAMESPACE + "/{topic}"


def non_persistent_topic_of(request: web.Request) -> TopicName:
    p = request.match_info
    return TopicName.parse(
        f"{TopicDomain.NON_PERSISTENT}://{p['tenant']}/{p['namespace']}/{p['topic']}"
    )


def non_persistent_routes(
    topics: TopicRegistry, namespaces: NamespaceListing, owners: OwnerCalls
) -> list[web.RouteDef]:
    api = _NonPersistentApi(topics, namespaces)
    return [
        web.get(NAMESPACE, api.list_topics),
        web.get(NAMESPACE + "/partitioned", api.list_partitioned_topics),
        web.put(TOPIC, api.create_topic),
        web.delete(TOPIC, api.delete_topic),
        web.get(TOPIC + "/stats", api.stats),
        web.get(TOPIC + "/subscriptions", api.list_subscriptions),
        *partitioned_topic_routes(topics, namespaces, owners, TOPIC, non_persistent_topic_of),
    ]


class _NonPersistentApi:
    def __init__(self, topics: TopicRegistry, namespaces: NamespaceListing) -> None:
        self.topics = topics
        self.namespaces = namespaces
        self.partitioned = namespaces.partitioned

    async def list_topics(self, request: web.Request) -> web.Response:
        """The topics live on this broker (each broker lists those it serves)."""
        return json_response(self.topics.non_persistent_topics_of_namespace(namespace_of(request)))

    async def list_partitioned_topics(self, request: web.Request) -> web.Response:
        await self.namespaces.refresh_listing()
        return json_response(
            self.partitioned.list_partitioned_topics(
                namespace_of(request), TopicDomain.NON_PERSISTENT
            )
        )

    async def create_topic(self, request: web.Request) -> web.Response:
        """A live topic with nothing attached (it goes away once idle, as in Pulsar)."""
        name = non_persistent_topic_of(request)
        self.topics.check_served(name)
        if self.topics.topic_exists(name) or self.partitioned.partitions_of(name):
            raise HttpError(HTTPStatus.CONFLICT, f"topic {name} already exists")
        self.topics.non_persistent_topic(name)
        return no_content()

    async def delete_topic(self, request: web.Request) -> web.Response:
        name = non_persistent_topic_of(request)
        await self.topics.delete_topic(name, force=query_flag(request, "force"))
        return no_content()

    def _live(self, request: web.Request) -> NonPersistentTopic:
        name = non_persistent_topic_of(request)
        self.topics.check_served(name)
        topic = self.topics.non_persistent.get(str(name))
        if topic is None:
            raise TopicNotFoundError(f"topic {name} does not exist")
        return topic

    async def stats(self, request: web.Request) -> web.Response:
        return json_response(self._live(request).stats())

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        return json_response(sorted(self._live(request).subscriptions))
