"""The broker process: storage on Kafka, the Pulsar listener and the admin HTTP server."""

from __future__ import annotations

import asyncio
import logging
import signal

from dedup_broker.admin.http import HttpServer
from dedup_broker.admin.routes import build_router
from dedup_broker.config import BrokerConfig
from dedup_broker.server.broker import BrokerService
from dedup_broker.storage.service import StorageService

log = logging.getLogger(__name__)


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.storage: StorageService | None = None
        self.broker: BrokerService | None = None
        self.http: HttpServer | None = None

    async def start(self) -> None:
        self.storage = await StorageService.start(self.config)
        self.broker = BrokerService(self.config, self.storage)
        await self.broker.start()
        self.http = HttpServer(
            build_router(self.broker), self.config.bind_address, self.config.web_service_port
        )
        await self.http.start()
        log.info(
            "dedup-broker ready: pulsar://%s:%d, http://%s:%d, Kafka %s",
            self.config.advertised_address,
            self.broker.port,
            self.config.advertised_address,
            self.http.port,
            self.config.kafka_bootstrap_servers,
        )

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self.broker is not None:
            await self.broker.stop()
        if self.storage is not None:
            await self.storage.close()

    async def run_until_signalled(self) -> None:
        """Serve until SIGINT/SIGTERM, then shut down cleanly (cursors flushed)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        try:
            await stop.wait()
        finally:
            log.info("shutting down")
            await self.stop()
