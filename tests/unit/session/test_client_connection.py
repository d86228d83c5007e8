"""A client connection before and around its commands: CONNECT first, keep-alive, commands
the broker does not serve, bytes that are not frames, and lookups."""

from __future__ import annotations

from dedup_broker import __version__
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.domain_base.names import TopicName
from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame, encode_command
from dedup_broker.session.handshake import SERVER_PROTOCOL_VERSION
from harness import client_commands as client
from harness.memory_broker import MemoryBroker, WireClient, settle

TOPIC = "persistent://public/default/orders"


def replies(*expected: pb.BaseCommand) -> list[Frame]:
    return [Frame(command, None) for command in expected]


def unconnected(broker: MemoryBroker) -> WireClient:
    return WireClient(broker.listener, 40999)


async def test_connect_negotiates_the_protocol_version() -> None:
    broker = MemoryBroker()
    connection = unconnected(broker)
    frames = await connection.exchange(client.connect(protocol_version=99))
    assert frames == replies(
        commands.connected(
            f"dedup-broker {__version__}",
            SERVER_PROTOCOL_VERSION,
            broker.config.max_message_size,
            pb.FeatureFlags(supports_topic_watchers=True),
        )
    )
    assert await connection.exchange(client.connect()) == replies(
        commands.error(0, pb.UnknownError, "CONNECT received twice on one connection")
    )


async def test_a_command_before_connect_closes_the_connection() -> None:
    connection = unconnected(MemoryBroker())
    frames = await connection.exchange(client.producer(TOPIC, 1, 1))
    assert frames == replies(
        commands.error(
            0, pb.UnknownError, "PRODUCER before CONNECT: the first command must be CONNECT"
        )
    )
    assert connection.transport.closed
    assert connection.connection.closed


async def test_bytes_that_are_not_a_frame_close_the_connection() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    connection.connection.data_received(b"\x00\x00\x00\x05\x00\x00\x00\x09junk!")
    await settle()
    (frame,) = connection.received()
    assert frame.command.type == pb.BaseCommand.ERROR
    assert connection.transport.closed
    assert broker.listener.connections == set()


async def test_ping_is_answered_and_unsupported_commands_are_refused() -> None:
    connection = await MemoryBroker().client()
    assert await connection.exchange(commands.ping()) == replies(commands.pong())
    unsupported = pb.BaseCommand(type=pb.BaseCommand.END_TXN_RESPONSE)
    unsupported.endTxnResponse.request_id = 3
    assert await connection.exchange(unsupported) == replies(
        commands.error(
            3, pb.NotAllowedError, "command END_TXN_RESPONSE is not supported by this broker"
        )
    )


async def test_lookups_point_at_this_broker_and_tell_the_partitions() -> None:
    broker = MemoryBroker()
    await broker.broker.partitioned_topics.create_partitioned_topic(TopicName.parse(TOPIC), 3)
    connection = await broker.client()
    metadata = pb.BaseCommand(type=pb.BaseCommand.PARTITIONED_METADATA)
    metadata.partitionMetadata.topic, metadata.partitionMetadata.request_id = TOPIC, 1
    lookup = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    lookup.lookupTopic.topic, lookup.lookupTopic.request_id = TOPIC + "-partition-0", 2
    assert await connection.exchange(metadata) == replies(
        commands.partitioned_metadata_response(1, 3)
    )
    assert await connection.exchange(lookup) == replies(
        commands.lookup_response(2, "pulsar://localhost:6650")
    )


async def test_a_lost_connection_leaves_no_producer_or_consumer_behind() -> None:
    broker = MemoryBroker()
    connection = await broker.client()
    await connection.exchange(client.producer(TOPIC, 1, 1, "p"))
    await connection.exchange(client.subscribe(TOPIC, "sub", 2, 2))
    connection.disconnect()
    topic = broker.broker.topics[TOPIC]
    assert topic.producers == {}
    assert topic.subscriptions["sub"].consumers == []
    assert broker.listener.connections == set()


async def test_lookups_name_the_tls_urls_too() -> None:
    """Clients on TLS follow brokerServiceUrlTls: this broker's TLS port, or the owner's
    (which its member tag announced)."""
    broker = MemoryBroker()
    broker.listener.tls_port = 6651
    connection = await broker.client()
    lookup = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    lookup.lookupTopic.topic, lookup.lookupTopic.request_id = TOPIC, 2
    assert await connection.exchange(lookup) == replies(
        commands.lookup_response(
            2, "pulsar://localhost:6650", broker_service_url_tls="pulsar+ssl://localhost:6651"
        )
    )
    owner = BrokerAddress("b2", 0, 8080, "i", 6661, 8443)

    async def owner_of(name: TopicName) -> BrokerAddress:
        return owner

    broker.broker.topic_registry.owner_of = owner_of  # type: ignore[method-assign]
    lookup.lookupTopic.request_id = 3
    assert await connection.exchange(lookup) == replies(
        commands.lookup_response(
            3,
            "pulsar+ssl://b2:6661",
            response="Redirect",
            authoritative=True,
            proxy_through_service_url=False,
            broker_service_url_tls="pulsar+ssl://b2:6661",
        )
    )


async def test_replies_of_one_turn_leave_in_one_write_in_order() -> None:
    """Commands that arrive together are answered in the order they came, in one write to
    the socket rather than one each."""
    connection = await MemoryBroker().client()
    connection.received()
    writes = connection.transport.writes
    unsupported = [pb.BaseCommand(type=pb.BaseCommand.END_TXN_RESPONSE) for _ in range(3)]
    for request_id, command in enumerate(unsupported):
        command.endTxnResponse.request_id = request_id
    arriving = [commands.ping(), *unsupported, commands.ping()]
    connection.connection.data_received(b"".join(encode_command(c) for c in arriving))
    await settle()
    refused = "command END_TXN_RESPONSE is not supported by this broker"
    assert connection.received() == replies(
        commands.pong(),
        *(commands.error(i, pb.NotAllowedError, refused) for i in range(3)),
        commands.pong(),
    )
    assert connection.transport.writes == writes + 1
