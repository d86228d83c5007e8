"""What namespaces hold, and namespaces that must exist before their topics: topics are
neither created nor listed elsewhere, and topics stored before namespaces had to exist
keep theirs."""

from __future__ import annotations

import json

import pytest

from dedup_broker.domain.partitioned import PARTITIONS_KEY
from dedup_broker.domain_base.names import TopicName
from dedup_broker.security.authorization import NamespaceNotFoundError, TenantInfo
from harness.memory_broker import MemoryBroker


async def test_no_topic_is_created_in_a_namespace_that_does_not_exist() -> None:
    broker = MemoryBroker()
    registry = broker.broker.topic_registry
    partitioned = broker.broker.partitioned_topics
    with pytest.raises(NamespaceNotFoundError, match=r"^Tenant does not exist: acme$"):
        await registry.get_topic(TopicName.parse("persistent://acme/app/t"))
    with pytest.raises(NamespaceNotFoundError, match=r"^Namespace does not exist: public/x$"):
        await registry.serve(TopicName.parse("non-persistent://public/x/t"))
    with pytest.raises(NamespaceNotFoundError, match="Namespace does not exist: public/x"):
        await partitioned.create_partitioned_topic(TopicName.parse("public/x/p"), 2)
    with pytest.raises(NamespaceNotFoundError, match="Namespace does not exist: public/x"):
        await partitioned.partitioned_metadata(TopicName.parse("public/x/p"))
    assert broker.storage.list_managed_ledgers() == []
    assert broker.storage.policies.items(PARTITIONS_KEY) == []


async def test_partitioned_topics_are_auto_created_only_in_namespaces_that_exist() -> None:
    broker = MemoryBroker.configured(allow_auto_topic_creation_type="partitioned")
    partitioned = broker.broker.partitioned_topics
    with pytest.raises(NamespaceNotFoundError):
        await partitioned.partitioned_metadata(TopicName.parse("public/x/p"))
    await broker.authorizer.tenancy.create_namespace("public/x")
    assert await partitioned.partitioned_metadata(TopicName.parse("public/x/p")) == 1


async def test_namespaces_holding_stored_topics_are_adopted_once() -> None:
    """Topics stored before tenants and namespaces had to be created keep being served:
    the broker creates their namespaces (and tenants) when it starts."""
    broker = MemoryBroker()
    broker.storage.ledger("legacy/app/persistent/orders")
    broker.storage.ledger("pulsar/system/persistent/__transaction_log_0")
    broker.storage.ledger("not a topic's ledger")
    await broker.storage.policies.put(
        PARTITIONS_KEY + "persistent://old/ns/p", json.dumps({"partitions": 2}).encode()
    )
    await broker.authorizer.tenancy.create_tenant("old", TenantInfo(admin_roles=("alice",)))
    namespaces = broker.broker.namespaces
    assert await namespaces.adopt_stored_namespaces() == ["legacy/app", "old/ns"]
    assert await namespaces.adopt_stored_namespaces() == []
    tenancy = broker.authorizer.tenancy
    assert tenancy.namespaces("legacy") == ["legacy/app"]
    assert tenancy.tenant("old") == TenantInfo(("alice",), (broker.config.cluster_name,))
    topic = await broker.topic("persistent://legacy/app/orders")
    assert topic.name == TopicName.parse("persistent://legacy/app/orders")
