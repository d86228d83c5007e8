"""HTTP security: authentication and authorization of every admin and lookup request, and
the routes of tenants, namespaces and their permissions.

- ``GET /admin/v2/tenants``; ``PUT/POST/GET/DELETE /admin/v2/tenants/{tenant}`` with
  ``{"adminRoles": [...], "allowedClusters": [...]}``
- ``PUT/POST/DELETE /admin/v2/clusters/{cluster}`` with Pulsar's ``ClusterData``
- ``GET /admin/v2/namespaces/{tenant}``; ``PUT/DELETE /admin/v2/namespaces/{tenant}/{namespace}``
  (``PUT`` with Pulsar's ``Policies``: its ``auth_policies`` are granted)
- ``GET .../{namespace}/permissions``; ``POST/DELETE .../{namespace}/permissions/{role}``
  with ``["produce", "consume"]``
- ``GET .../{namespace}/permissions/subscription`` (subscription -> roles);
  ``POST .../permissions/subscription/{subscription}`` with ``["role", ...]``;
  ``DELETE .../permissions/{subscription}/{role}``
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dedup_broker.domain.listing import NamespaceListing
from dedup_broker.domain_base.names import NAME_PART, TopicName
from dedup_broker.http.bodies import json_response, no_content, read_json
from dedup_broker.http.errors import ErrorStatuses, HttpError
from dedup_broker.http.paths import NAMESPACES, TOPIC, namespace_of, topic_of
from dedup_broker.security.authentication import AuthenticationError, Authenticator
from dedup_broker.security.authorization import (
    AuthorizationError,
    Authorizer,
    InvalidTenancyError,
    NamespaceNotFoundError,
    NamespacePolicies,
    Tenancy,
    TenancyConflictError,
    TenancyNotFoundError,
    TenantInfo,
    actions_of,
)
from dedup_broker.security.subscription_permissions import SubscriptionGrantNotFoundError
from dedup_broker.security.tls import PeerCertificate, peer_certificate

UNAUTHENTICATED_PATHS = frozenset({"/metrics", "/admin/v2/brokers/health"})
"""Liveness and metrics stay open, for probes and scrapers (as Pulsar's
``authenticateMetricsEndpoint=false``)."""

LOOKUP_SHAPES = frozenset(
    f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/partitions"
    for domain in ("persistent", "non-persistent")
)
"""Partitioned-topic metadata, which clients read before a lookup: Pulsar's ``LOOKUP``
operation, allowed to any role that may produce or consume."""
TOPIC_LISTING_SHAPES = frozenset(
    {
        NAMESPACES + "/topics",
        "/admin/v2/persistent/{tenant}/{namespace}",
        "/admin/v2/non-persistent/{tenant}/{namespace}",
    }
)
"""A namespace's topics (pattern consumers of HTTP clients list them): Pulsar's
``GET_TOPICS``, allowed to roles that may consume (and produce)."""

TRANSACTIONS = "/admin/v3/transactions/"
"""Pulsar checks no permission on the transaction reads (coordinator stats, a
transaction's metadata, buffer and pending-ack stats): any authenticated role (the
anonymous role too) may read them; only ``abortTransaction`` needs a superuser."""

CLUSTERS = "/admin/v2/clusters"
"""Listing the clusters needs no permission in Pulsar: any authenticated role (the
anonymous role too) may read it; a cluster's data needs a superuser."""
CLUSTER = CLUSTERS + "/{cluster}"
TENANTS = "/admin/v2/tenants"
TENANT = TENANTS + "/{tenant}"
PERMISSIONS = NAMESPACES + "/permissions"
TOPIC_PERMISSIONS = TOPIC + "/permissions"

SECURITY_ERROR_STATUSES: ErrorStatuses = {
    AuthenticationError: HTTPStatus.UNAUTHORIZED,
    AuthorizationError: HTTPStatus.FORBIDDEN,
    TenancyConflictError: HTTPStatus.CONFLICT,
    TenancyNotFoundError: HTTPStatus.NOT_FOUND,
    InvalidTenancyError: HTTPStatus.BAD_REQUEST,
    SubscriptionGrantNotFoundError: HTTPStatus.NOT_FOUND,
}


def request_certificate(request: web.Request) -> PeerCertificate | None:
    """The verified client certificate of an HTTPS request (None over plain HTTP)."""
    transport = request.transport
    if transport is None:
        return None
    return peer_certificate(transport.get_extra_info("ssl_object"))


def authentication_middleware(authenticator: Authenticator) -> Middleware:
    """401 with Pulsar's reason shape unless the request authenticates; the role is
    ``request["role"]``."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if authenticator.enabled and request.path.rstrip("/") not in UNAUTHENTICATED_PATHS:
            try:
                request["role"] = authenticator.authenticate_http(
                    request.headers, request_certificate(request)
                )
            except AuthenticationError as exc:
                return web.json_response(
                    {"reason": f"Authentication required: {exc}"},
                    status=HTTPStatus.UNAUTHORIZED,
                    headers={"WWW-Authenticate": 'Bearer realm="pulsar"'},
                )
        return await handler(request)

    return authenticate


def namespace_middleware(tenancy: Tenancy) -> Middleware:
    """Everything under a namespace (its topics, lookups, listings, schemas, policies) is
    a 404 with Pulsar's reason ("Tenant does not exist", "Namespace does not exist") while
    the namespace or its tenant does not exist, whoever asks; creating it is the one
    route that does not need it. Runs before authorization, as Pulsar checks."""

    @web.middleware
    async def require_namespace(request: web.Request, handler: Handler) -> web.StreamResponse:
        if _names_a_namespace(request):
            params = request.match_info
            try:
                await tenancy.require_namespace(f"{params['tenant']}/{params['namespace']}")
            except NamespaceNotFoundError as exc:
                raise HttpError(HTTPStatus.NOT_FOUND, exc.reason) from None
        return await handler(request)

    return require_namespace


def _names_a_namespace(request: web.Request) -> bool:
    """A well-formed ``tenant/namespace`` in the path (a malformed one is the handler's
    412), on any route but the namespace's creation."""
    params = request.match_info
    names = (params.get("tenant"), params.get("namespace"))
    if not all(name is not None and NAME_PART.fullmatch(name) for name in names):
        return False
    resource = params.route.resource
    shape = resource.canonical.rstrip("/") if resource is not None else ""
    return not (request.method == "PUT" and shape == NAMESPACES)


def authorization_middleware(authorizer: Authorizer) -> Middleware:
    """Every route is checked, by its path shape: lookups need produce or consume on the
    topic; a tenant's routes (its namespaces, topics, policies) need an admin of the tenant
    (reading the tenant too); transaction reads and the list of clusters need no
    permission; everything else
    (creating tenants, clusters, brokers, ledger deletion, aborting a transaction) needs a
    superuser. A refusal is a 403 with the reason."""

    @web.middleware
    async def authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
        if authorizer.enabled and request.path.rstrip("/") not in UNAUTHENTICATED_PATHS:
            _authorize(authorizer, request)
        return await handler(request)

    return authorize


def _authorize(authorizer: Authorizer, request: web.Request) -> None:
    resource = request.match_info.route.resource
    if resource is None:
        return  # no such route: a 404 follows
    shape = resource.canonical.rstrip("/")
    role: str | None = request.get("role")
    params = request.match_info
    what = f"{request.method} {request.path}"
    if shape.startswith(TRANSACTIONS):
        if request.method != "GET":
            authorizer.check_superuser(role, what)
    elif request.method == "GET" and shape == CLUSTERS:
        return
    elif shape.startswith("/lookup/") or (request.method == "GET" and shape in LOOKUP_SHAPES):
        domain = params.get("domain") or shape.split("/")[3]
        topic = TopicName.parse(
            f"{domain}://{params['tenant']}/{params['namespace']}/{params['topic']}"
        )
        authorizer.check_lookup(role, topic)
    elif request.method == "GET" and shape in TOPIC_LISTING_SHAPES:
        authorizer.check_namespace_read(role, namespace_of(request), what)
    elif "tenant" in params and (shape != TENANT or request.method == "GET"):
        authorizer.check_tenant_admin(role, params["tenant"], what)
    else:
        authorizer.check_superuser(role, what)


def tenancy_routes(authorizer: Authorizer, namespaces: NamespaceListing) -> list[web.RouteDef]:
    """A namespace is deleted only when ``namespaces`` says it holds no topic."""
    api = _TenancyApi(authorizer, namespaces)
    return [
        web.put(CLUSTER, api.create_cluster),
        web.post(CLUSTER, api.update_cluster),
        web.delete(CLUSTER, api.delete_cluster),
        web.get(TENANTS, api.list_tenants),
        web.get(TENANT, api.get_tenant),
        web.put(TENANT, api.create_tenant),
        web.post(TENANT, api.update_tenant),
        web.delete(TENANT, api.delete_tenant),
        web.get("/admin/v2/namespaces/{tenant}", api.list_namespaces),
        web.put(NAMESPACES, api.create_namespace),
        web.delete(NAMESPACES, api.delete_namespace),
        web.get(PERMISSIONS, api.get_permissions),
        web.post(PERMISSIONS + "/{role}", api.grant),
        web.delete(PERMISSIONS + "/{role}", api.revoke),
        web.get(PERMISSIONS + "/subscription", api.get_subscription_permissions),
        web.post(PERMISSIONS + "/subscription/{subscription}", api.grant_subscription),
        web.delete(PERMISSIONS + "/{subscription}/{role}", api.revoke_subscription),
        web.get(TOPIC_PERMISSIONS, api.get_topic_permissions),
        web.post(TOPIC_PERMISSIONS + "/{role}", api.grant_topic),
        web.delete(TOPIC_PERMISSIONS + "/{role}", api.revoke_topic),
    ]


class _TenancyApi:
    def __init__(self, authorizer: Authorizer, namespaces: NamespaceListing) -> None:
        self.tenancy = authorizer.tenancy
        self.subscriptions = authorizer.subscriptions
        self.namespaces = namespaces

    async def create_cluster(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        await self.tenancy.create_cluster(request.match_info["cluster"], await read_json(request))
        return no_content()

    async def update_cluster(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        await self.tenancy.update_cluster(request.match_info["cluster"], await read_json(request))
        return no_content()

    async def delete_cluster(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        await self.tenancy.delete_cluster(request.match_info["cluster"])
        return no_content()

    async def list_tenants(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        return json_response(self.tenancy.tenants())

    async def get_tenant(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        name = request.match_info["tenant"]
        info = self.tenancy.tenant(name)
        if info is None:
            raise TenancyNotFoundError(f"Tenant does not exist: {name}")
        return json_response(info.to_json())

    async def create_tenant(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        info = TenantInfo.from_json(await _optional_json(request))
        await self.tenancy.create_tenant(request.match_info["tenant"], info)
        return no_content()

    async def update_tenant(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        info = TenantInfo.from_json(await read_json(request))
        await self.tenancy.update_tenant(request.match_info["tenant"], info)
        return no_content()

    async def delete_tenant(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        await self.tenancy.delete_tenant(request.match_info["tenant"])
        return no_content()

    async def list_namespaces(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        tenant = request.match_info["tenant"]
        if self.tenancy.tenant(tenant) is None:
            raise TenancyNotFoundError(f"Tenant does not exist: {tenant}")
        return json_response(self.tenancy.namespaces(tenant))

    async def create_namespace(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        policies = NamespacePolicies.from_json(await _optional_json(request))
        await self.tenancy.create_namespace(namespace_of(request), policies)
        return no_content()

    async def delete_namespace(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        namespace = namespace_of(request)
        if await self.namespaces.current_topics_of_namespace(namespace):
            raise TenancyConflictError(f"Cannot delete non empty namespace: {namespace}")
        await self.tenancy.delete_namespace(namespace)
        return no_content()

    async def get_permissions(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        info = self.tenancy.namespace(namespace_of(request))
        if info is None:
            raise TenancyNotFoundError(f"Namespace does not exist: {namespace_of(request)}")
        return json_response(info.to_json()["permissions"])

    async def grant(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        actions = actions_of(await read_json(request))
        await self.tenancy.grant(namespace_of(request), request.match_info["role"], actions)
        return no_content()

    async def revoke(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        await self.tenancy.revoke(namespace_of(request), request.match_info["role"])
        return no_content()

    async def get_subscription_permissions(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        return json_response(self.subscriptions.roles(namespace_of(request)))

    async def grant_subscription(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        roles = await read_json(request)
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"expected a list of roles, got {roles!r}")
        subscription = request.match_info["subscription"]
        await self.subscriptions.grant(namespace_of(request), subscription, roles)
        return no_content()

    async def revoke_subscription(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        params = request.match_info
        await self.subscriptions.revoke(
            namespace_of(request), params["subscription"], params["role"]
        )
        return no_content()

    async def get_topic_permissions(self, request: web.Request) -> web.Response:
        """The namespace's grants and the topic's own, merged (as Pulsar answers)."""
        await self.tenancy.table.refresh()
        topic = topic_of(request)
        info = self.tenancy.namespace(topic.namespace_name)
        if info is None:
            raise TenancyNotFoundError(f"Namespace does not exist: {topic.namespace_name}")
        merged = {role: set(actions) for role, actions in info.permissions.items()}
        for role, actions in self.tenancy.topic_permissions(topic).items():
            merged.setdefault(role, set()).update(actions)
        return json_response(
            {
                role: [a.value for a in actions_of([x.value for x in granted])]
                for role, granted in sorted(merged.items())
            }
        )

    async def grant_topic(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        actions = actions_of(await read_json(request))
        await self.tenancy.grant_topic(topic_of(request), request.match_info["role"], actions)
        return no_content()

    async def revoke_topic(self, request: web.Request) -> web.Response:
        await self.tenancy.table.refresh()
        await self.tenancy.revoke_topic(topic_of(request), request.match_info["role"])
        return no_content()


async def _optional_json(request: web.Request) -> object:
    """Pulsar's admin clients may create a tenant or a namespace with no body."""
    return await read_json(request) if (await request.read()).strip() else None
