"""The real broker and its client connections, in memory: for fast tests of what clients
hear, byte for byte, without sockets, Kafka or Redis.

``MemoryBroker`` wires the real ``Broker`` (topics, subscriptions, deduplication) over
``MemoryStorage``; ``WireClient`` drives a real ``ClientConnection`` through a
``RecordingTransport`` that keeps every byte the broker writes and decodes it into
frames. Key-window deduplication is wired but has no Redis: leave it disabled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.broker import Broker
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.key_dedup.metrics import KeyDedupMetrics
from dedup_broker.key_dedup.service import KeyDedupService
from dedup_broker.key_dedup.store import KeyStore
from dedup_broker.metrics_registry import new_registry
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import (
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    encode_command,
    encode_payload_command,
)
from dedup_broker.security.authentication import Authenticator
from dedup_broker.security.authorization import Authorizer, Tenancy
from dedup_broker.session.connection import ClientConnection
from dedup_broker.session.listener import Listener
from dedup_broker.session.metrics import SessionMetrics
from harness import client_commands
from harness.memory_ledger import MemoryLedger
from harness.memory_storage import MemoryStorage

SETTLE_ROUNDS = 200


async def settle(rounds: int = SETTLE_ROUNDS) -> None:
    """Let every ready callback and task run (timers, like the rate-limited cursor
    writes or keep-alives, do not fire)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class RecordingTransport(asyncio.Transport):
    """A socket's transport that keeps what is written; closing it tells the protocol on
    the next loop iteration, as asyncio's own transports do."""

    def __init__(self, protocol: asyncio.Protocol, peer: tuple[str, int]) -> None:
        super().__init__(extra={"peername": peer})
        self._protocol = protocol
        self.written = bytearray()
        self.reading = True
        self.closed = False
        self.writes = 0
        """Calls of :meth:`write`: what would be system calls on a socket."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closed:
            self.written += data
            self.writes += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Nothing is ever buffered; ``buffer_full`` plays a slow reader instead."""

    def get_write_buffer_size(self) -> int:
        return 0

    def buffer_full(self, full: bool) -> None:
        """The peer stops (or resumes) reading: the protocol pauses (resumes) writing."""
        if full:
            self._protocol.pause_writing()
        else:
            self._protocol.resume_writing()


class WireClient:
    """One client connection: commands go in as bytes, the broker's frames come out."""

    def __init__(self, listener: Listener, port: int) -> None:
        self.connection = ClientConnection(listener)
        self.transport = RecordingTransport(self.connection, ("127.0.0.1", port))
        self.connection.connection_made(self.transport)
        self._decoder = FrameDecoder(listener.config.max_message_size + FRAME_PADDING)
        self._read = 0

    def send(self, command: pb.BaseCommand, payload: bytes | None = None) -> None:
        """The command arrives from the socket (handlers may still need the loop)."""
        if payload is None:
            self.connection.data_received(encode_command(command))
        else:
            self.connection.data_received(encode_payload_command(command, payload))

    def received(self) -> list[Frame]:
        """The frames the broker wrote since the previous call (what it queued in this
        turn of the loop included)."""
        self.connection.flush()
        data = bytes(self.transport.written[self._read :])
        self._read = len(self.transport.written)
        return self._decoder.feed(data)

    async def exchange(self, command: pb.BaseCommand, payload: bytes | None = None) -> list[Frame]:
        """Send one command and return every frame written until the broker is idle."""
        self.send(command, payload)
        await settle()
        return self.received()

    async def connect(self) -> None:
        frames = await self.exchange(client_commands.connect())
        assert [f.command.type for f in frames] == [pb.BaseCommand.CONNECTED], frames

    def disconnect(self) -> None:
        """The socket goes away (the client crashed or the network dropped it)."""
        self.transport.closed = True
        self.connection.connection_lost(None)


class MemoryBroker:
    """The real broker over ``MemoryStorage``, as the app wires it (without listening)."""

    def __init__(self, config: BrokerConfig | None = None, storage: MemoryStorage | None = None):
        self.config = config or BrokerConfig()
        self.storage = storage or MemoryStorage(self.config)
        registry = new_registry()
        self.policies = Policies(self.storage.policies.as_metadata_table())
        key_dedup = KeyDedupService(
            self.config,
            KeyStore(self.config.redis_url, connection=self.config.redis_connection()),
            self.policies,
            KeyDedupMetrics(registry),
        )
        self.broker = Broker(
            self.config,
            self.storage.as_service(),
            self.policies,
            BrokerMetrics(registry),
            key_dedup,
        )
        self.authorizer = Authorizer(
            self.config, Tenancy(self.storage.policies.as_metadata_table(), self.config)
        )
        self.listener = Listener(
            self.config,
            self.broker,
            SessionMetrics(registry),
            Authenticator(self.config),
            self.authorizer,
        )
        self._ports = iter(range(40000, 50000))

    @classmethod
    def configured(cls, **settings: Any) -> MemoryBroker:
        return cls(BrokerConfig().with_overrides(**settings))

    async def client(self) -> WireClient:
        """A new client connection that has completed CONNECT."""
        client = WireClient(self.listener, next(self._ports))
        await client.connect()
        return client

    async def topic(self, name: str) -> Topic:
        return await self.broker.topic_registry.get_topic(TopicName.parse(name))

    def ledger(self, topic: str) -> MemoryLedger:
        """The open managed ledger of a loaded topic."""
        return self.storage.open_managed_ledgers[TopicName.parse(topic).managed_ledger_name]

    async def restarted(self, graceful: bool = True) -> MemoryBroker:
        """A new broker process on the same stored data; this one is closed first
        (``graceful``) or simply abandoned, as in a crash."""
        if graceful:
            await self.broker.close()
        return MemoryBroker(self.config, self.storage.restarted())
