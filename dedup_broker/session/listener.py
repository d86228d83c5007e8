"""The Pulsar protocol listeners: plain and TLS ports accept client connections (the same
protocol on both) and keep track of them."""

from __future__ import annotations

import asyncio
import logging
import ssl

from dedup_broker.cluster.listeners import AdvertisedListeners
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.broker import Broker
from dedup_broker.security.authentication import Authenticator
from dedup_broker.security.authorization import Authorizer
from dedup_broker.session.connection import ClientConnection
from dedup_broker.session.metrics import SessionMetrics

log = logging.getLogger(__name__)


class Listener:
    def __init__(
        self,
        config: BrokerConfig,
        broker: Broker,
        metrics: SessionMetrics,
        authenticator: Authenticator,
        authorizer: Authorizer,
        ssl_context: ssl.SSLContext | None = None,
        listeners: AdvertisedListeners | None = None,
    ) -> None:
        self.config = config
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.advertised_listeners = listeners
        """Named listeners (``advertisedListeners``); None: clients' listener names unused."""
        self.broker = broker
        self.metrics = metrics
        self.connections: set[ClientConnection] = set()
        self.port = config.broker_service_port
        """The plain port once bound (None: no plain listener)."""
        self.tls_port = config.broker_service_port_tls if ssl_context is not None else None
        """The TLS port once bound (None: no TLS listener)."""
        self._ssl_context = ssl_context
        self._servers: list[asyncio.Server] = []
        metrics.watch_connections(lambda: len(self.connections))

    @property
    def service_url(self) -> str:
        """The plain URL, or the TLS one when the plain port is off."""
        if self.port is None:
            return self.service_url_tls or ""
        return f"pulsar://{self.config.advertised_address}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        if self.tls_port is None:
            return None
        return f"pulsar+ssl://{self.config.advertised_address}:{self.tls_port}"

    async def start(self) -> None:
        if self.port is not None:
            self.port = await self._serve(self.port, None)
        if self.tls_port is not None:
            self.tls_port = await self._serve(self.tls_port, self._ssl_context)

    async def _serve(self, port: int, context: ssl.SSLContext | None) -> int:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: ClientConnection(self),
            self.config.bind_address,
            port,
            reuse_address=True,
            ssl=context,
        )
        self._servers.append(server)
        bound = int(server.sockets[0].getsockname()[1])
        log.info(
            "serving the Pulsar protocol%s on %s:%d",
            " over TLS" if context is not None else "",
            self.config.bind_address,
            bound,
        )
        return bound

    def stop_accepting(self) -> None:
        for server in self._servers:
            server.close()

    async def close(self) -> None:
        """Stop accepting and drop every connection (their clients reconnect elsewhere)."""
        self.stop_accepting()
        for connection in list(self.connections):
            connection.close()
        for server in self._servers:
            await server.wait_closed()

    def connection_opened(self, connection: object) -> None:
        assert isinstance(connection, ClientConnection)
        self.connections.add(connection)
        self.metrics.connections_opened.inc()

    def connections_from(self, host: str) -> int:
        """Open connections whose peer is ``host`` (``maxConnectionsPerIp``)."""
        return sum(1 for c in self.connections if c.remote_host == host)

    def connection_closed(self, connection: object) -> None:
        assert isinstance(connection, ClientConnection)
        self.connections.discard(connection)
        self.metrics.connections_closed.inc()
