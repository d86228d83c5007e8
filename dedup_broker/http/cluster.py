"""Cluster routes in Pulsar's REST shape: clusters, brokers, bundles, HTTP lookups,
unloading, and the 307 redirect of topic calls to the topic's owner."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dedup_broker.cluster.listeners import AdvertisedListeners
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster, NotOwnerError
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain_base.names import TopicName
from dedup_broker.http.bodies import json_response
from dedup_broker.http.errors import HttpError
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.security.authorization import Tenancy

LOOKUP = "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"


def lookup_data(address: BrokerAddress) -> dict[str, str]:
    """Pulsar's ``LookupData``."""
    return {
        "brokerUrl": address.service_url,
        "brokerUrlTls": address.service_url_tls or "",
        "httpUrl": address.web_url,
        "httpUrlTls": address.web_url_tls or "",
        "nativeUrl": address.service_url,
    }


def redirect_middleware(topics: TopicRegistry) -> Middleware:
    """A topic call reaching a broker that does not own the topic is answered with 307
    to the owner's same URL, as Pulsar's brokers do."""

    @web.middleware
    async def to_owner(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except NotOwnerError as exc:
            owner = await topics.owner_of(exc.topic)
            if owner is None:  # it came back to this broker meanwhile
                return await handler(request)
            base = (owner.web_url_tls if request.secure else None) or owner.web_url
            raise web.HTTPTemporaryRedirect(base + request.path_qs) from None

    return to_owner


class ClusterApi:
    def __init__(
        self,
        topics: TopicRegistry,
        cluster: Cluster,
        listeners: AdvertisedListeners | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.topics = topics
        self.cluster = cluster
        self.listeners = listeners
        self.tenancy = tenancy

    def _check_cluster(self, request: web.Request) -> None:
        name = request.match_info["cluster"]
        if name != self.cluster.config.cluster_name:
            raise HttpError(HTTPStatus.NOT_FOUND, f"cluster {name} does not exist")

    async def clusters(self, request: web.Request) -> web.Response:
        if self.tenancy is None:
            return json_response([self.cluster.config.cluster_name])
        await self.tenancy.table.refresh()
        return json_response(self.tenancy.clusters())

    async def cluster_data(self, request: web.Request) -> web.Response:
        """The ``ClusterData`` a cluster was registered with (this one's too, once a PUT
        or POST gave it), else this cluster's URLs (its first live broker's)."""
        name = request.match_info["cluster"]
        if self.tenancy is not None:
            await self.tenancy.table.refresh()
            registered = self.tenancy.registered_cluster(name)
            if registered is not None:
                return json_response(registered)
        self._check_cluster(request)
        view = await self.cluster.view()
        first = view.brokers[0] if view.brokers else self.cluster.address
        return json_response(
            {
                "serviceUrl": first.web_url,
                "serviceUrlTls": first.web_url_tls or "",
                "brokerServiceUrl": first.service_url,
                "brokerServiceUrlTls": first.service_url_tls or "",
                "brokerServiceUrls": [b.service_url for b in view.brokers],
            }
        )

    async def brokers(self, request: web.Request) -> web.Response:
        self._check_cluster(request)
        view = await self.cluster.view()
        return json_response([b.broker_id for b in view.brokers])

    async def owned_slots(self, request: web.Request) -> web.Response:
        """Which broker owns which bundle slot (and this broker's own slots)."""
        view = await self.cluster.view()
        return json_response(
            {
                "broker": self.cluster.address.broker_id,
                "ownedSlots": sorted(self.cluster.owned),
                "owners": {str(s): b.broker_id for s, b in sorted(view.owners.items())},
            }
        )

    async def bundles(self, request: web.Request) -> web.Response:
        bundle_map = self.cluster.bundles
        return json_response(
            {"boundaries": bundle_map.boundaries_hex(), "numBundles": bundle_map.number_of_bundles}
        )

    async def lookup(self, request: web.Request) -> web.Response:
        p = request.match_info
        name = TopicName.parse(f"{p['domain']}://{p['tenant']}/{p['namespace']}/{p['topic']}")
        owner = await self.topics.owner_of(name)
        data = lookup_data(owner or self.cluster.address)
        listener = request.query.get("listenerName") or request.headers.get(
            "X-Pulsar-ListenerName", ""
        )
        if self.listeners is not None:
            # The listener named, else the internal one (the owner's address and ports);
            # an unknown name fails, as on Pulsar.
            urls = await self.listeners.urls(owner, listener or None)
            data["brokerUrl"] = data["nativeUrl"] = urls.lookup_url or ""
            data["brokerUrlTls"] = urls.service_url_tls or ""
        return json_response(data)

    async def unload_topic(self, request: web.Request) -> web.Response:
        """Close the topic (its clients reconnect); calls for another owner's topic go
        there (307)."""
        name = topic_of(request)
        self.cluster.check_owned(name)
        await self.topics.unload_topic(name)
        return web.Response(status=HTTPStatus.NO_CONTENT)

    async def unload_bundle(self, request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        bundle = self.cluster.bundles.bundle_named(namespace, request.match_info["bundle"])
        if bundle is None:
            raise HttpError(
                HTTPStatus.NOT_FOUND,
                f"{request.match_info['bundle']} is not a bundle of {namespace} "
                f"(boundaries {self.cluster.bundles.boundaries_hex()})",
            )
        for topic in list(self.topics.topics.values()):
            if topic.name.namespace_name == namespace and bundle.contains_topic(topic.name):
                await self.topics.unload_topic(topic.name)
        return web.Response(status=HTTPStatus.NO_CONTENT)


def cluster_routes(
    topics: TopicRegistry,
    cluster: Cluster,
    listeners: AdvertisedListeners | None = None,
    tenancy: Tenancy | None = None,
) -> list[web.RouteDef]:
    """``listeners``: lookups naming a listener (``?listenerName=``) get its URLs;
    ``tenancy``: the other clusters registered through the admin API."""
    api = ClusterApi(topics, cluster, listeners, tenancy)
    return [
        web.get("/admin/v2/clusters", api.clusters),
        web.get("/admin/v2/clusters/{cluster}", api.cluster_data),
        web.get("/admin/v2/brokers/{cluster}", api.brokers),
        web.get("/admin/v2/brokers/ownership/slots", api.owned_slots),
        web.get(NAMESPACES + "/bundles", api.bundles),
        web.put(NAMESPACES + "/{bundle}/unload", api.unload_bundle),
        web.put(TOPIC + "/unload", api.unload_topic),
        web.get(LOOKUP, api.lookup),
    ]
