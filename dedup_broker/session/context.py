"""What the parts of a session see of each other: the connection, as its command concerns
use it, and the listener, as a connection uses it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from dedup_broker.cluster.listeners import AdvertisedListeners
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.broker import Broker
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import Frame
from dedup_broker.security.authentication import Authenticator
from dedup_broker.security.authorization import Authorizer
from dedup_broker.security.tls import PeerCertificate
from dedup_broker.session.metrics import SessionMetrics

Handler = Callable[[Frame], Awaitable[None] | None]
"""Handles one command; a coroutine when the answer needs I/O."""


class Session(Protocol):
    """One client connection, as the handshake, producer, consumer and lookup commands
    use it."""

    broker: Broker
    config: BrokerConfig
    metrics: SessionMetrics
    remote_address: str
    writable: bool
    closed: bool
    authenticator: Authenticator
    authorizer: Authorizer
    advertised_listeners: AdvertisedListeners | None
    role: str | None
    """Who the client proved to be at CONNECT (None: authentication is off)."""
    client_version: str
    """What CONNECT named the client, for stats."""
    tls: bool
    """The client connected over TLS (lookups answer with TLS URLs)."""
    peer_certificate: PeerCertificate | None
    """The client's verified TLS certificate, if it presented one."""

    @property
    def service_url(self) -> str: ...

    @property
    def service_url_tls(self) -> str | None: ...

    def send_command(self, command: pb.BaseCommand) -> None: ...

    def close(self) -> None: ...

    def write_bytes(self, data: bytes) -> None: ...

    def publish_started(self) -> None: ...

    def publish_finished(self) -> None: ...

    def pong_received(self) -> None: ...


class ConnectionHost(Protocol):
    """The listener that accepted a connection."""

    broker: Broker
    config: BrokerConfig
    metrics: SessionMetrics
    authenticator: Authenticator
    authorizer: Authorizer
    advertised_listeners: AdvertisedListeners | None

    @property
    def service_url(self) -> str: ...

    @property
    def service_url_tls(self) -> str | None: ...

    def connection_opened(self, connection: object) -> None: ...

    def connections_from(self, host: str) -> int: ...

    def connection_closed(self, connection: object) -> None: ...
