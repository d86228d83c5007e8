"""Tenants, namespaces and permissions, and what each role may do."""

from __future__ import annotations

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import ConfigError
from dedup_broker.security.authorization import (
    AuthAction,
    AuthorizationError,
    Authorizer,
    InvalidTenancyError,
    NamespaceNotFoundError,
    Tenancy,
    TenancyConflictError,
    TenancyNotFoundError,
    TenantInfo,
    actions_of,
)
from dedup_broker.storage.tables.metadata_table import TableValues
from harness.memory_table import MemoryTable

SECURED = BrokerConfig().with_overrides(
    authentication_enabled=True, authorization_enabled=True, super_user_roles="root, ops"
)
TOPIC = TopicName.parse("persistent://acme/app/orders")


async def acme(config: BrokerConfig = SECURED) -> Authorizer:
    tenancy = Tenancy(MemoryTable().as_metadata_table(), config)
    await tenancy.create_tenant("acme", TenantInfo(admin_roles=("alice",)))
    await tenancy.create_namespace("acme/app")
    await tenancy.grant("acme/app", "bob", [AuthAction.PRODUCE])
    await tenancy.grant("acme/app", "carol", [AuthAction.CONSUME, AuthAction.PRODUCE])
    return Authorizer(config, tenancy)


async def test_permissions_produce_and_consume() -> None:
    authorizer = await acme()
    authorizer.check_topic("bob", TOPIC, AuthAction.PRODUCE)
    authorizer.check_lookup("bob", TOPIC)
    with pytest.raises(AuthorizationError, match="'bob' is not authorized to consume"):
        authorizer.check_topic("bob", TOPIC, AuthAction.CONSUME)
    authorizer.check_topic("carol", TOPIC, AuthAction.CONSUME)
    with pytest.raises(AuthorizationError, match="look up"):
        authorizer.check_lookup("dave", TOPIC)
    with pytest.raises(AuthorizationError, match="unauthenticated"):
        authorizer.check_lookup(None, TOPIC)


async def test_tenant_admins_and_superusers() -> None:
    authorizer = await acme()
    authorizer.check_topic("alice", TOPIC, AuthAction.CONSUME)
    authorizer.check_tenant_admin("alice", "acme", "manage")
    with pytest.raises(AuthorizationError, match="not an admin of tenant public"):
        authorizer.check_tenant_admin("alice", "public", "manage")
    with pytest.raises(AuthorizationError, match="superusers only"):
        authorizer.check_superuser("alice", "create tenants")
    for superuser in ("root", "ops"):
        authorizer.check_superuser(superuser, "create tenants")
        authorizer.check_topic(superuser, TOPIC, AuthAction.PRODUCE)


async def test_the_system_namespace_is_for_superusers_only() -> None:
    authorizer = await acme()
    await authorizer.tenancy.create_tenant("pulsar", TenantInfo(admin_roles=("alice",)))
    system = TopicName.parse("persistent://pulsar/system/changes")
    with pytest.raises(AuthorizationError):
        authorizer.check_topic("alice", system, AuthAction.CONSUME)
    authorizer.check_topic("root", system, AuthAction.CONSUME)


async def test_revoking_applies_to_the_next_check() -> None:
    authorizer = await acme()
    await authorizer.tenancy.revoke("acme/app", "bob")
    with pytest.raises(AuthorizationError):
        authorizer.check_topic("bob", TOPIC, AuthAction.PRODUCE)


async def test_everything_is_allowed_with_authorization_off() -> None:
    authorizer = await acme(BrokerConfig())
    authorizer.check_topic(None, TOPIC, AuthAction.PRODUCE)
    authorizer.check_superuser(None, "anything")


async def test_tenancy_rules() -> None:
    tenancy = (await acme()).tenancy
    assert tenancy.tenants() == ["acme", "public", "pulsar"]
    assert tenancy.namespaces("public") == ["public/default"]
    assert tenancy.namespaces("pulsar") == ["pulsar/system"]
    assert tenancy.namespaces("acme") == ["acme/app"]
    with pytest.raises(TenancyConflictError):
        await tenancy.create_tenant("acme", TenantInfo())
    with pytest.raises(TenancyConflictError, match="active namespaces"):
        await tenancy.delete_tenant("acme")
    with pytest.raises(TenancyNotFoundError):
        await tenancy.create_namespace("nobody/ns")
    with pytest.raises(InvalidTenancyError, match="Clusters do not exist"):
        await tenancy.create_tenant("far", TenantInfo(allowed_clusters=("mars",)))
    with pytest.raises(InvalidTenancyError, match="invalid tenant"):
        await tenancy.create_tenant("a b", TenantInfo())
    await tenancy.delete_namespace("acme/app")
    await tenancy.delete_tenant("acme")
    assert tenancy.tenants() == ["public", "pulsar"]


async def test_a_namespace_exists_once_created_with_its_tenant() -> None:
    """Topics live only in namespaces that exist: Pulsar's words name what is missing;
    the default namespace and the system namespace always exist."""
    tenancy = Tenancy(MemoryTable().as_metadata_table(), BrokerConfig())
    tenancy.check_namespace("public/default")
    tenancy.check_namespace("pulsar/system")
    with pytest.raises(NamespaceNotFoundError, match=r"^Tenant does not exist: acme$") as missing:
        tenancy.check_namespace("acme/app")
    assert missing.value.reason == "Tenant does not exist"
    with pytest.raises(NamespaceNotFoundError, match=r"^Namespace does not exist: public/other$"):
        tenancy.check_namespace("public/other")
    await tenancy.create_tenant("acme", TenantInfo())
    with pytest.raises(NamespaceNotFoundError, match="Namespace does not exist: acme/app"):
        await tenancy.require_namespace("acme/app")
    await tenancy.create_namespace("acme/app")
    await tenancy.require_namespace("acme/app")
    await tenancy.delete_namespace("acme/app")
    with pytest.raises(NamespaceNotFoundError):
        tenancy.check_namespace("acme/app")


class Replica(TableValues):
    """One broker's copy of a table other brokers write: their writes show after a
    refresh."""

    def __init__(self, shared: MemoryTable) -> None:
        super().__init__()
        self.shared = shared
        self.refreshes = 0

    async def refresh(self) -> None:
        self.refreshes += 1
        for key, _ in self.items():
            if self.shared.get(key) is None:
                self._set(key, None)
        for key, value in self.shared.items():
            self._set(key, value)

    async def put(self, key: str, value: bytes) -> None:
        await self.shared.put(key, value)
        self._set(key, value)

    async def delete(self, key: str) -> None:
        await self.shared.delete(key)
        self._set(key, None)


async def test_a_namespace_another_broker_created_is_read_before_a_refusal() -> None:
    """The table is read afresh before a namespace is said to be missing (a refusal is
    final for the clients), and only then."""
    shared = MemoryTable()
    here = Replica(shared)
    tenancy = Tenancy(here, BrokerConfig())
    elsewhere = Tenancy(Replica(shared), BrokerConfig())
    await elsewhere.create_tenant("acme", TenantInfo())
    await elsewhere.create_namespace("acme/app")
    with pytest.raises(NamespaceNotFoundError):
        tenancy.check_namespace("acme/app")
    await tenancy.require_namespace("acme/app")
    assert here.refreshes == 1
    await tenancy.require_namespace("acme/app")
    await tenancy.require_namespace("public/default")
    assert here.refreshes == 1
    with pytest.raises(NamespaceNotFoundError, match="Namespace does not exist: acme/other"):
        await tenancy.require_namespace("acme/other")
    assert here.refreshes == 2


async def test_adopting_creates_the_namespace_and_its_tenant() -> None:
    tenancy = Tenancy(MemoryTable().as_metadata_table(), BrokerConfig())
    await tenancy.adopt("legacy/app")
    tenancy.check_namespace("legacy/app")
    assert tenancy.tenant("legacy") == TenantInfo((), (BrokerConfig().cluster_name,))
    await tenancy.adopt("legacy/app")  # once is enough: nothing changes
    assert tenancy.namespaces("legacy") == ["legacy/app"]


def test_actions_are_pulsars() -> None:
    assert actions_of(["consume", "produce", "produce"]) == (AuthAction.PRODUCE, AuthAction.CONSUME)
    with pytest.raises(InvalidTenancyError, match="unknown action"):
        actions_of(["publish"])
    with pytest.raises(InvalidTenancyError):
        actions_of("produce")


def test_authorization_needs_authentication() -> None:
    with pytest.raises(ConfigError, match="authorizationEnabled needs authenticationEnabled"):
        Authorizer.check_settings(BrokerConfig().with_overrides(authorization_enabled=True))


async def test_topic_permissions_add_to_the_namespace_ones() -> None:
    authorizer = await acme()
    other = TopicName.parse("persistent://acme/app/other")
    await authorizer.tenancy.grant_topic(TOPIC, "dave", [AuthAction.CONSUME])
    authorizer.check_topic("dave", TOPIC, AuthAction.CONSUME)
    authorizer.check_lookup("dave", TOPIC)
    partition = TopicName.parse("persistent://acme/app/orders-partition-2")
    authorizer.check_topic("dave", partition, AuthAction.CONSUME)  # the partitioned topic's
    with pytest.raises(AuthorizationError):
        authorizer.check_topic("dave", TOPIC, AuthAction.PRODUCE)
    with pytest.raises(AuthorizationError):
        authorizer.check_lookup("dave", other)
    await authorizer.tenancy.revoke_topic(TOPIC, "dave")
    with pytest.raises(AuthorizationError):
        authorizer.check_topic("dave", TOPIC, AuthAction.CONSUME)
    with pytest.raises(TenancyNotFoundError):
        await authorizer.tenancy.revoke_topic(TOPIC, "dave")
