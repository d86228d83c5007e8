"""The broker process: storage on Kafka, the Pulsar listener and the admin HTTP server."""

from __future__ import annotations

import asyncio
import logging
import signal

from prometheus_client import CollectorRegistry

from dedup_broker.admin.collected import show_counters
from dedup_broker.admin.http import HttpServer
from dedup_broker.admin.routes import build_router
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import BrokerError
from dedup_broker.server.broker import BrokerService
from dedup_broker.server.retention import RetentionChecker
from dedup_broker.storage.broker_registry import broker_key, broker_record
from dedup_broker.storage.service import StorageService
from system_topics.mark_phase import TwoPhaseLedgerDeleter, two_phase_deleter

log = logging.getLogger(__name__)


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.storage: StorageService | None = None
        self.broker: BrokerService | None = None
        self.http: HttpServer | None = None
        self.retention: RetentionChecker | None = None

    async def start(self) -> None:
        two_phase = self.config.topic_two_phase_deletion_enabled
        self.storage = await StorageService.start(
            self.config, two_phase_deleter if two_phase else None
        )
        self.broker = BrokerService(self.config, self.storage)
        await self.broker.start()
        deleter = self.storage.deleter
        if isinstance(deleter, TwoPhaseLedgerDeleter):
            deletion_metrics = CollectorRegistry(auto_describe=True)
            deleter.register_metrics(deletion_metrics)
            show_counters(deletion_metrics, self.broker.metrics.registry)
        self.retention = RetentionChecker(self.broker)
        self.retention.start()
        self.http = HttpServer(
            build_router(self.broker), self.config.bind_address, self.config.web_service_port
        )
        await self.http.start()
        await self._register()
        log.info(
            "dedup-broker ready: pulsar://%s:%d, http://%s:%d, Kafka %s",
            self.config.advertised_address,
            self.broker.port,
            self.config.advertised_address,
            self.http.port,
            self.config.kafka_bootstrap_servers,
        )

    async def _register(self) -> None:
        """Announce this broker's admin URL (deletion workers ask it about ledgers)."""
        assert self.storage is not None and self.http is not None
        url = f"http://{self.config.advertised_address}:{self.http.port}"
        key = broker_key(self.config.advertised_address, self.config.broker_service_port)
        await self.storage.policies.put(key, broker_record(url, self.storage.broker_id))

    async def stop(self) -> None:
        if self.retention is not None:
            await self.retention.stop()
        if self.storage is not None and self.broker is not None:
            key = broker_key(self.config.advertised_address, self.config.broker_service_port)
            try:
                await self.storage.policies.delete(key)
            except BrokerError as exc:
                log.warning("unregistering the broker failed: %s", exc)
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
