"""The Pulsar protocol listener: accepts client connections and keeps track of them."""

from __future__ import annotations

import asyncio
import logging

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
    ) -> None:
        self.config = config
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.broker = broker
        self.metrics = metrics
        self.connections: set[ClientConnection] = set()
        self.port = config.broker_service_port
        self._server: asyncio.Server | None = None
        metrics.watch_connections(lambda: len(self.connections))

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_address}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ClientConnection(self),
            self.config.bind_address,
            self.config.broker_service_port,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving the Pulsar protocol on %s:%d", self.config.bind_address, self.port)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop accepting and drop every connection (their clients reconnect elsewhere)."""
        self.stop_accepting()
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()

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
