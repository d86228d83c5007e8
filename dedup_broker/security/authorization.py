"""Authorization with Pulsar's model: tenants with admin roles, namespaces with
permissions granted to roles, superusers.

Tenants, namespaces and their permissions live in the compacted policies table, so every
broker of a cluster reads the same ones and changes apply at runtime. With
``authorizationEnabled`` off (the default) every check passes, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import NAME_PART, TopicName
from dedup_broker.errors import ConfigError, PermanentError, TopicNotFoundError
from dedup_broker.security.subscription_permissions import SubscriptionPermissions

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable

TENANT_KEY = "tenants/"
NAMESPACE_KEY = "namespaces/"
TOPIC_PERMISSIONS_KEY = "topic-permissions/"
CLUSTER_KEY = "clusters/"
SYSTEM_NAMESPACE = "pulsar/system"
"""Reserved for the broker's own use: superusers only."""


class AuthAction(StrEnum):
    """What a namespace permission allows (Pulsar's ``AuthAction`` names)."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class AuthorizationError(PermanentError):
    """The role may not do this (Pulsar's AuthorizationError; HTTP 403)."""


class TenancyConflictError(PermanentError):
    """A tenant or namespace exists already, or is not empty (HTTP 409)."""


class TenancyNotFoundError(PermanentError):
    """No such tenant or namespace (HTTP 404)."""


class InvalidTenancyError(PermanentError):
    """A malformed tenant, namespace or permission body (HTTP 400)."""


class NamespaceNotFoundError(TopicNotFoundError):
    """A topic's tenant or namespace does not exist: Pulsar answers ``TopicNotFound`` on
    the binary protocol (final for every client) and 404 over HTTP, whatever the topic."""

    def __init__(self, reason: str, name: str) -> None:
        super().__init__(f"{reason}: {name}")
        self.reason = reason
        """Pulsar's own words ("Tenant does not exist", "Namespace does not exist")."""


@dataclass(frozen=True)
class TenantInfo:
    admin_roles: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "adminRoles": list(self.admin_roles),
            "allowedClusters": list(self.allowed_clusters),
        }

    @classmethod
    def from_json(cls, body: object) -> TenantInfo:
        if body is None:
            return cls()
        if not isinstance(body, dict):
            raise InvalidTenancyError("a tenant is a JSON object with adminRoles, allowedClusters")
        return cls(
            _strings(body.get("adminRoles") or [], "adminRoles"),
            _strings(body.get("allowedClusters") or [], "allowedClusters"),
        )


@dataclass(frozen=True)
class NamespaceInfo:
    permissions: dict[str, tuple[AuthAction, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "permissions": {
                role: [action.value for action in actions]
                for role, actions in sorted(self.permissions.items())
            }
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> NamespaceInfo:
        permissions = body.get("permissions", {})
        return cls({role: actions_of(names) for role, names in permissions.items()})


@dataclass(frozen=True)
class NamespacePolicies:
    """What a Pulsar ``Policies`` body creating a namespace says about access:
    ``auth_policies.namespace_auth`` (role -> actions on the namespace),
    ``auth_policies.destination_auth`` (topic -> role -> actions) and
    ``replication_clusters`` (which must be known clusters)."""

    permissions: dict[str, tuple[AuthAction, ...]] = field(default_factory=dict)
    topic_permissions: dict[str, dict[str, tuple[AuthAction, ...]]] = field(default_factory=dict)
    replication_clusters: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, body: object) -> NamespacePolicies:
        if body is None:
            return cls()
        if not isinstance(body, dict):
            raise InvalidTenancyError("namespace policies are a JSON object")
        auth = body.get("auth_policies") or {}
        if not isinstance(auth, dict):
            raise InvalidTenancyError("auth_policies must be a JSON object")
        namespace_auth = _grants(auth.get("namespace_auth"), "auth_policies.namespace_auth")
        topics = auth.get("destination_auth") or {}
        if not isinstance(topics, dict):
            raise InvalidTenancyError("auth_policies.destination_auth must be a JSON object")
        return cls(
            namespace_auth,
            {
                topic: _grants(grants, f"destination_auth.{topic}")
                for topic, grants in topics.items()
            },
            _strings(body.get("replication_clusters") or [], "replication_clusters"),
        )


def _grants(value: object, label: str) -> dict[str, tuple[AuthAction, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidTenancyError(f"{label} must map roles to lists of actions")
    return {role: actions_of(names) for role, names in value.items()}


def _strings(value: object, label: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidTenancyError(f"{label} must be a list of strings")
    return tuple(value)


CLUSTER_URL_FIELDS = ("serviceUrl", "serviceUrlTls", "brokerServiceUrl", "brokerServiceUrlTls")


def _cluster_data(body: object) -> dict[str, Any]:
    """Pulsar's ``ClusterData``: its URLs are kept as given (other fields too)."""
    if not isinstance(body, dict):
        raise InvalidTenancyError("a cluster is a JSON object with serviceUrl, brokerServiceUrl")
    for name in CLUSTER_URL_FIELDS:
        if body.get(name) is not None and not isinstance(body[name], str):
            raise InvalidTenancyError(f"{name} must be a string")
    return dict(body)


def actions_of(names: object) -> tuple[AuthAction, ...]:
    """Pulsar's action names, in a stable order; anything else is refused."""
    values = _strings(names, "actions")
    try:
        chosen = {AuthAction(name) for name in values}
    except ValueError:
        allowed = ", ".join(action.value for action in AuthAction)
        raise InvalidTenancyError(f"unknown action in {list(values)}; allowed: {allowed}") from None
    return tuple(action for action in AuthAction if action in chosen)


def _check_name(name: str, label: str) -> None:
    if not NAME_PART.fullmatch(name):
        raise InvalidTenancyError(f"invalid {label} name {name!r}")


class Tenancy:
    """Tenants and namespaces in the policies table. A tenant or namespace exists once
    created; the default namespace and ``pulsar/system`` (the transaction coordinators'
    topics) and their tenants always exist, as in a Pulsar standalone."""

    def __init__(self, table: MetadataTable, config: BrokerConfig) -> None:
        self.table = table
        self.default_tenant = config.default_tenant
        self.default_namespace = f"{config.default_tenant}/{config.default_namespace}"
        self.cluster_name = config.cluster_name
        self.built_in_namespaces = frozenset({self.default_namespace, SYSTEM_NAMESPACE})
        self.built_in_tenants = frozenset(ns.split("/")[0] for ns in self.built_in_namespaces)

    # --- tenants ------------------------------------------------------------------------
    def tenants(self) -> list[str]:
        stored = {key[len(TENANT_KEY) :] for key, _ in self.table.items(TENANT_KEY)}
        return sorted(stored | self.built_in_tenants)

    def tenant(self, name: str) -> TenantInfo | None:
        raw = self.table.get(TENANT_KEY + name)
        if raw is not None:
            return TenantInfo.from_json(json.loads(raw))
        if name in self.built_in_tenants:
            return TenantInfo(allowed_clusters=(self.cluster_name,))
        return None

    async def create_tenant(self, name: str, info: TenantInfo) -> None:
        _check_name(name, "tenant")
        if self.table.get(TENANT_KEY + name) is not None:
            raise TenancyConflictError(f"Tenant already exists: {name}")
        await self._put_tenant(name, info)

    async def update_tenant(self, name: str, info: TenantInfo) -> None:
        if self.tenant(name) is None:
            raise TenancyNotFoundError(f"Tenant does not exist: {name}")
        await self._put_tenant(name, info)

    async def _put_tenant(self, name: str, info: TenantInfo) -> None:
        if not info.allowed_clusters:
            info = TenantInfo(info.admin_roles, (self.cluster_name,))
        self._check_clusters(info.allowed_clusters)
        await self.table.put(TENANT_KEY + name, json.dumps(info.to_json()).encode())

    async def delete_tenant(self, name: str) -> None:
        if self.tenant(name) is None:
            raise TenancyNotFoundError(f"Tenant does not exist: {name}")
        if self.namespaces(name):
            raise TenancyConflictError(f"The tenant still has active namespaces: {name}")
        await self.table.delete(TENANT_KEY + name)

    # --- clusters (this one, and others registered with their URLs) ----------------------
    def clusters(self) -> list[str]:
        stored = {key[len(CLUSTER_KEY) :] for key, _ in self.table.items(CLUSTER_KEY)}
        return sorted(stored | {self.cluster_name})

    def registered_cluster(self, name: str) -> dict[str, Any] | None:
        """The ``ClusterData`` stored for a cluster created through the admin API."""
        raw = self.table.get(CLUSTER_KEY + name)
        return None if raw is None else dict(json.loads(raw))

    async def create_cluster(self, name: str, data: object) -> None:
        """Pulsar's ``PUT /admin/v2/clusters/{name}``: a cluster is registered with its
        ``ClusterData`` once, then it exists (409). This broker's own cluster is listed
        before that, like the default tenant: the setup scripts of secured standalones
        (the official clients' CI) register it with its URLs, and the first PUT does."""
        _check_name(name, "cluster")
        if self.registered_cluster(name) is not None:
            raise TenancyConflictError(f"Cluster already exists: {name}")
        await self.table.put(CLUSTER_KEY + name, json.dumps(_cluster_data(data)).encode())

    async def update_cluster(self, name: str, data: object) -> None:
        if name not in self.clusters():
            raise TenancyNotFoundError(f"Cluster does not exist: {name}")
        await self.table.put(CLUSTER_KEY + name, json.dumps(_cluster_data(data)).encode())

    async def delete_cluster(self, name: str) -> None:
        if name == self.cluster_name:
            raise TenancyConflictError(f"Cluster {name} is this broker's own cluster")
        if self.table.get(CLUSTER_KEY + name) is None:
            raise TenancyNotFoundError(f"Cluster does not exist: {name}")
        await self.table.delete(CLUSTER_KEY + name)

    def _check_clusters(self, names: Iterable[str]) -> None:
        unknown = [c for c in names if c not in self.clusters()]
        if unknown:
            raise InvalidTenancyError(f"Clusters do not exist: {unknown}")

    # --- namespaces ---------------------------------------------------------------------
    def namespaces(self, tenant: str) -> list[str]:
        prefix = f"{NAMESPACE_KEY}{tenant}/"
        stored = {key[len(NAMESPACE_KEY) :] for key, _ in self.table.items(prefix)}
        stored.update(ns for ns in self.built_in_namespaces if ns.startswith(tenant + "/"))
        return sorted(stored)

    def namespace(self, namespace: str) -> NamespaceInfo | None:
        raw = self.table.get(NAMESPACE_KEY + namespace)
        if raw is not None:
            return NamespaceInfo.from_json(json.loads(raw))
        return NamespaceInfo() if namespace in self.built_in_namespaces else None

    def check_namespace(self, namespace: str) -> None:
        """Raise ``NamespaceNotFoundError`` unless the namespace (``tenant/ns``) and its
        tenant exist, as this broker last read the table."""
        if namespace in self.built_in_namespaces:
            return
        if self.table.get(NAMESPACE_KEY + namespace) is not None:
            return
        tenant = namespace.split("/")[0]
        if self.tenant(tenant) is None:
            raise NamespaceNotFoundError("Tenant does not exist", tenant)
        raise NamespaceNotFoundError("Namespace does not exist", namespace)

    async def require_namespace(self, namespace: str) -> None:
        """``check_namespace``, reading the table afresh before refusing: a namespace
        another broker created a moment ago is found (a refusal is final for clients)."""
        try:
            self.check_namespace(namespace)
        except NamespaceNotFoundError:
            await self.table.refresh()
            self.check_namespace(namespace)

    async def adopt(self, namespace: str) -> None:
        """Create a namespace (and its tenant) that holds topics stored before tenants and
        namespaces had to be created, so that its topics stay reachable."""
        tenant = namespace.split("/")[0]
        if self.tenant(tenant) is None:
            await self._put_tenant(tenant, TenantInfo())
        if self.namespace(namespace) is None:
            await self._put_namespace(namespace, NamespaceInfo())

    async def create_namespace(
        self, namespace: str, policies: NamespacePolicies | None = None
    ) -> None:
        """A new namespace; ``policies`` (a Pulsar ``Policies`` body) grants its roles."""
        tenant, _, local = namespace.partition("/")
        _check_name(local, "namespace")
        if self.tenant(tenant) is None:
            raise TenancyNotFoundError(f"Tenant does not exist: {tenant}")
        if self.table.get(NAMESPACE_KEY + namespace) is not None:
            raise TenancyConflictError(f"Namespace already exists: {namespace}")
        policies = policies or NamespacePolicies()
        self._check_clusters(policies.replication_clusters)
        for topic in policies.topic_permissions:
            if TopicName.parse(topic).namespace_name != namespace:
                raise InvalidTenancyError(f"{topic} is not a topic of {namespace}")
        info = self.namespace(namespace) or NamespaceInfo()
        await self._put_namespace(
            namespace, NamespaceInfo({**info.permissions, **policies.permissions})
        )
        for topic, grants in policies.topic_permissions.items():
            name = TopicName.parse(topic)
            await self._put_topic_permissions(name, {**self.topic_permissions(name), **grants})

    async def delete_namespace(self, namespace: str) -> None:
        if self.namespace(namespace) is None:
            raise TenancyNotFoundError(f"Namespace does not exist: {namespace}")
        await self.table.delete(NAMESPACE_KEY + namespace)

    async def grant(self, namespace: str, role: str, actions: Iterable[AuthAction]) -> None:
        info = self._existing(namespace)
        granted = {**info.permissions, role: actions_of([a.value for a in actions])}
        await self._put_namespace(namespace, NamespaceInfo(granted))

    async def revoke(self, namespace: str, role: str) -> None:
        info = self._existing(namespace)
        remaining = {r: a for r, a in info.permissions.items() if r != role}
        await self._put_namespace(namespace, NamespaceInfo(remaining))

    def _existing(self, namespace: str) -> NamespaceInfo:
        info = self.namespace(namespace)
        if info is None:
            raise TenancyNotFoundError(f"Namespace does not exist: {namespace}")
        return info

    async def _put_namespace(self, namespace: str, info: NamespaceInfo) -> None:
        await self.table.put(NAMESPACE_KEY + namespace, json.dumps(info.to_json()).encode())

    # --- topic permissions (a partition has its partitioned topic's) ---------------------
    def topic_permissions(self, topic: TopicName) -> dict[str, tuple[AuthAction, ...]]:
        raw = self.table.get(TOPIC_PERMISSIONS_KEY + str(topic.partitioned_base))
        if raw is None:
            return {}
        return NamespaceInfo.from_json({"permissions": json.loads(raw)}).permissions

    async def grant_topic(self, topic: TopicName, role: str, actions: Iterable[AuthAction]) -> None:
        granted = {**self.topic_permissions(topic), role: actions_of([a.value for a in actions])}
        await self._put_topic_permissions(topic, granted)

    async def revoke_topic(self, topic: TopicName, role: str) -> None:
        granted = self.topic_permissions(topic)
        if role not in granted:
            raise TenancyNotFoundError(f"role {role} has no permission on topic {topic}")
        await self._put_topic_permissions(topic, {r: a for r, a in granted.items() if r != role})

    async def _put_topic_permissions(
        self, topic: TopicName, granted: dict[str, tuple[AuthAction, ...]]
    ) -> None:
        key = TOPIC_PERMISSIONS_KEY + str(topic.partitioned_base)
        if not granted:
            await self.table.delete(key)
            return
        body = NamespaceInfo(granted).to_json()["permissions"]
        await self.table.put(key, json.dumps(body).encode())


class Authorizer:
    """Decides what a role may do; every refusal is an AuthorizationError with a reason."""

    def __init__(self, config: BrokerConfig, tenancy: Tenancy) -> None:
        self.check_settings(config)
        self.enabled = config.authorization_enabled
        self.tenancy = tenancy
        self.subscriptions = SubscriptionPermissions(tenancy.table)
        self.super_users = frozenset(
            role.strip() for role in config.super_user_roles.split(",") if role.strip()
        )

    @staticmethod
    def check_settings(config: BrokerConfig) -> None:
        if config.authorization_enabled and not config.authentication_enabled:
            raise ConfigError(
                "authorizationEnabled needs authenticationEnabled: roles come from authentication"
            )

    def is_superuser(self, role: str | None) -> bool:
        return not self.enabled or (role is not None and role in self.super_users)

    def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        if self.is_superuser(role):
            return True
        info = self.tenancy.tenant(tenant)
        return role is not None and info is not None and role in info.admin_roles

    def check_superuser(self, role: str | None, what: str) -> None:
        if not self.is_superuser(role):
            raise AuthorizationError(f"{_who(role)} is not authorized to {what} (superusers only)")

    def check_tenant_admin(self, role: str | None, tenant: str, what: str) -> None:
        if not self.is_tenant_admin(role, tenant):
            raise AuthorizationError(
                f"{_who(role)} is not authorized to {what}: not an admin of tenant {tenant}"
            )

    def allowed(
        self,
        role: str | None,
        namespace: str,
        actions: Iterable[AuthAction],
        topic: TopicName | None = None,
    ) -> bool:
        """Whether the role holds one of ``actions`` on the namespace, or on ``topic``
        (tenant admins and superusers hold all of them; the system namespace is the
        superusers' alone)."""
        if self.is_superuser(role):
            return True
        if namespace == SYSTEM_NAMESPACE or role is None:
            return False
        if self.is_tenant_admin(role, namespace.split("/")[0]):
            return True
        info = self.tenancy.namespace(namespace)
        granted = set(info.permissions.get(role, ())) if info is not None else set()
        if topic is not None:
            granted |= set(self.tenancy.topic_permissions(topic).get(role, ()))
        return any(action in granted for action in actions)

    def check_topic(self, role: str | None, topic: TopicName, action: AuthAction) -> None:
        if not self.allowed(role, topic.namespace_name, (action,), topic):
            self._check_namespace_exists(topic)
            raise AuthorizationError(f"{_who(role)} is not authorized to {action.value} on {topic}")

    def check_subscription(self, role: str | None, topic: TopicName, subscription: str) -> None:
        """A subscription given roles (``permissions/subscription``) admits only them,
        tenant admins and superusers."""
        if self.is_tenant_admin(role, topic.tenant):
            return
        if not self.subscriptions.admits(topic.namespace_name, subscription, role):
            raise AuthorizationError(
                f"{_who(role)} is not authorized to consume subscription {subscription} of {topic}"
            )

    def check_lookup(self, role: str | None, topic: TopicName) -> None:
        """Lookups (and partitioned metadata) need produce or consume, on the namespace or
        the topic."""
        either = (AuthAction.PRODUCE, AuthAction.CONSUME)
        if not self.allowed(role, topic.namespace_name, either, topic):
            self._check_namespace_exists(topic)
            raise AuthorizationError(f"{_who(role)} is not authorized to look up {topic}")

    def _check_namespace_exists(self, topic: TopicName) -> None:
        """A topic of a tenant or namespace that does not exist is not found, whoever asks
        (Pulsar answers ``TopicNotFound`` before it speaks of permissions)."""
        self.tenancy.check_namespace(topic.namespace_name)

    def check_namespace_read(self, role: str | None, namespace: str, what: str) -> None:
        if not self.allowed(role, namespace, (AuthAction.PRODUCE, AuthAction.CONSUME)):
            raise AuthorizationError(f"{_who(role)} is not authorized to {what}")


def _who(role: str | None) -> str:
    return f"role {role!r}" if role is not None else "an unauthenticated client"
