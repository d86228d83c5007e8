"""Lookups, partitioned metadata, producers and consumers of topics whose tenant or
namespace does not exist, and of names that are not valid: refused with codes every
official client treats as final, so that the client's call fails at once."""

from __future__ import annotations

from dedup_broker.protocol import client_commands as requests
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame
from dedup_broker.security.authorization import TenantInfo
from harness import client_commands as client
from harness.memory_broker import MemoryBroker

MISSING_TENANT = "persistent://acme/app/orders"
MISSING_NAMESPACE = "persistent://public/other/orders"


def replies(*expected: pb.BaseCommand) -> list[Frame]:
    return [Frame(command, None) for command in expected]


async def test_a_missing_tenant_or_namespace_is_topic_not_found_everywhere() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    for topic, reason in (
        (MISSING_TENANT, "Tenant does not exist: acme"),
        (MISSING_NAMESPACE, "Namespace does not exist: public/other"),
        ("non-persistent://public/other/live", "Namespace does not exist: public/other"),
    ):
        assert await connection.exchange(requests.partitioned_metadata(topic, 1)) == replies(
            commands.partitioned_metadata_response(1, error=pb.TopicNotFound, message=reason)
        )
        assert await connection.exchange(requests.lookup(topic, 2)) == replies(
            commands.lookup_response(2, "", error=pb.TopicNotFound, message=reason)
        )
        assert await connection.exchange(client.producer(topic, 1, 3)) == replies(
            commands.error(3, pb.TopicNotFound, reason)
        )
        assert await connection.exchange(client.subscribe(topic, "s", 1, 4)) == replies(
            commands.error(4, pb.TopicNotFound, reason)
        )
    assert broker.broker.topics == {}
    assert broker.broker.topic_registry.non_persistent == {}
    assert broker.storage.as_service().list_managed_ledgers() == []


async def test_topics_of_a_namespace_created_then_are_served() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    tenancy = broker.authorizer.tenancy
    await tenancy.create_tenant("acme", TenantInfo())
    await tenancy.create_namespace("acme/app")
    assert await connection.exchange(requests.partitioned_metadata(MISSING_TENANT, 1)) == replies(
        commands.partitioned_metadata_response(1, 0)
    )
    assert await connection.exchange(requests.lookup(MISSING_TENANT, 2)) == replies(
        commands.lookup_response(2, "pulsar://localhost:6650")
    )
    (success,) = await connection.exchange(client.producer(MISSING_TENANT, 1, 3, "p"))
    assert success.command.type == pb.BaseCommand.PRODUCER_SUCCESS
    assert list(broker.broker.topics) == [MISSING_TENANT]


async def test_the_default_and_the_system_namespaces_always_exist() -> None:
    connection = await MemoryBroker().client()
    for topic in ("orders", "persistent://pulsar/system/transaction_coordinator_assign"):
        assert await connection.exchange(requests.partitioned_metadata(topic, 1)) == replies(
            commands.partitioned_metadata_response(1, 0)
        )


async def test_an_invalid_name_is_refused_with_a_final_code() -> None:
    """The C++-based clients retry ``InvalidTopicName`` until their operation timeout;
    ``NotAllowedError`` fails their call at once, the reason in the message."""
    connection = await MemoryBroker().client()
    topic = "persistent://public/default/bad name"
    reason = "invalid topic name 'bad name' in 'persistent://public/default/bad name'"
    assert await connection.exchange(requests.partitioned_metadata(topic, 1)) == replies(
        commands.partitioned_metadata_response(1, error=pb.NotAllowedError, message=reason)
    )
    assert await connection.exchange(requests.lookup(topic, 2)) == replies(
        commands.lookup_response(2, "", error=pb.NotAllowedError, message=reason)
    )
    assert await connection.exchange(client.producer(topic, 1, 3)) == replies(
        commands.error(3, pb.NotAllowedError, reason)
    )
