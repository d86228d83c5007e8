"""The composition root: builds every collaborator, wires them, runs until a signal.

Nothing else constructs its own collaborators: Kafka clients and storage, the Redis key
store, the broker domain, the protocol listener and the HTTP app are all made here.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
import tracemalloc
import uuid
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from dedup_broker.allocations import AllocationReports
from dedup_broker.backlog.checker import BacklogQuotaChecker
from dedup_broker.backlog.quota import default_quotas
from dedup_broker.cluster.listeners import AdvertisedListeners, parse_advertised_listeners
from dedup_broker.cluster.membership import BrokerAddress, owners_topic
from dedup_broker.cluster.metrics import ClusterMetrics
from dedup_broker.cluster.service import HANDOVER_WAIT_SECONDS, Cluster
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.broker import Broker
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain_base.dynamic_configuration import DynamicConfiguration
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import BrokerError
from dedup_broker.http.backlog_quota import BACKLOG_ERROR_STATUSES, backlog_quota_routes
from dedup_broker.http.brokers import dynamic_configuration_routes, live_broker_routes
from dedup_broker.http.cluster import cluster_routes, redirect_middleware
from dedup_broker.http.compaction import COMPACTION_ERROR_STATUSES, compaction_routes
from dedup_broker.http.encryption import encryption_routes
from dedup_broker.http.key_dedup import KEY_DEDUP_ERROR_STATUSES, key_dedup_routes
from dedup_broker.http.ledger_deletion import ledger_deletion_routes
from dedup_broker.http.messages import MESSAGES_ERROR_STATUSES, message_routes
from dedup_broker.http.namespace_policies import namespace_policy_routes
from dedup_broker.http.non_persistent import non_persistent_routes
from dedup_broker.http.owners import OwnerCalls
from dedup_broker.http.pip6 import pip6_routes
from dedup_broker.http.retention import retention_routes
from dedup_broker.http.schema import SCHEMA_ERROR_STATUSES, schema_routes
from dedup_broker.http.security import (
    SECURITY_ERROR_STATUSES,
    authentication_middleware,
    authorization_middleware,
    namespace_middleware,
    tenancy_routes,
)
from dedup_broker.http.serving import HttpEndpoint, new_app, start_http
from dedup_broker.http.tiered import OFFLOAD_ERROR_STATUSES, offload_routes
from dedup_broker.http.topic_policies import TOPIC_POLICY_ERROR_STATUSES, topic_policy_routes
from dedup_broker.http.topics import (
    TOPIC_ERROR_STATUSES,
    broker_routes,
    configuration_routes,
    topic_routes,
)
from dedup_broker.http.transactions import TRANSACTION_ERROR_STATUSES, transaction_routes
from dedup_broker.kafka_logging import KafkaClientErrors
from dedup_broker.key_dedup.metrics import KeyDedupMetrics
from dedup_broker.key_dedup.service import KeyDedupService, key_dedup_defaults
from dedup_broker.key_dedup.store import KeyStore
from dedup_broker.metrics_registry import new_registry
from dedup_broker.retention.policy import RetentionChecker
from dedup_broker.schema.registry import SchemaRegistry, default_strategy
from dedup_broker.security.authentication import Authenticator
from dedup_broker.security.authorization import Authorizer, Tenancy
from dedup_broker.security.broker_client import (
    broker_client_credentials,
    broker_client_headers,
    broker_client_ssl_context,
)
from dedup_broker.security.tls import ServerTls, server_tls
from dedup_broker.session.listener import Listener
from dedup_broker.session.metrics import SessionMetrics
from dedup_broker.storage.api import (
    LedgerUsage,
    broker_key,
    broker_record,
)
from dedup_broker.storage.offload.filesystem import offload_directory
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from system_topics.mark_phase import TwoPhaseLedgerDeleter, two_phase_deleter

log = logging.getLogger(__name__)


def validate_settings(config: BrokerConfig) -> Authenticator:
    """Settings each feature checks itself (``ConfigError``), before anything starts."""
    key_dedup_defaults(config)
    offload_directory(config)
    Authorizer.check_settings(config)
    default_quotas(config)
    parse_advertised_listeners(config.advertised_listeners)
    broker_client_headers(config)
    broker_client_ssl_context(config)
    server_tls(config)
    default_strategy(config)
    return Authenticator(config)


def http_app(
    broker: Broker,
    registry: CollectorRegistry,
    usage: LedgerUsage,
    authenticator: Authenticator | None = None,
    authorizer: Authorizer | None = None,
    ready: Callable[[], bool] = lambda: True,
    listeners: AdvertisedListeners | None = None,
) -> web.Application:
    """The admin, lookup and metrics surface: each room's routes, given what they use,
    and one error table. ``usage``: what the broker's storage says about its ledgers."""
    config, policies = broker.config, broker.policies
    topics, namespaces = broker.topic_registry, broker.namespaces
    authorizer = authorizer or Authorizer(config, Tenancy(policies.table, config))
    owners = OwnerCalls(config, topics.owner_of)
    routes = [
        *tenancy_routes(authorizer, namespaces),
        *broker_routes(registry, ready),
        *configuration_routes(config),
        *(
            [
                *cluster_routes(topics, broker.cluster, listeners, authorizer.tenancy),
                *live_broker_routes(broker.cluster),
            ]
            if broker.cluster
            else []
        ),
        *dynamic_configuration_routes(DynamicConfiguration(policies.table, config)),
        *topic_routes(topics, namespaces, owners, policies),
        *message_routes(topics),
        *backlog_quota_routes(policies, config),
        *encryption_routes(policies),
        *non_persistent_routes(topics, namespaces, owners),
        *pip6_routes(policies, topics),
        *key_dedup_routes(policies, broker.key_dedup),
        *retention_routes(policies, config, topics),
        *offload_routes(policies, config, topics),
        *compaction_routes(policies, config, topics, namespaces.partitioned, owners),
        *ledger_deletion_routes(config, usage),
        *schema_routes(broker.schemas),
        *transaction_routes(broker, owners),
        *topic_policy_routes(policies, config, topics),
        *namespace_policy_routes(policies),
    ]
    statuses = {
        **TOPIC_ERROR_STATUSES,
        **KEY_DEDUP_ERROR_STATUSES,
        **MESSAGES_ERROR_STATUSES,
        **BACKLOG_ERROR_STATUSES,
        **OFFLOAD_ERROR_STATUSES,
        **COMPACTION_ERROR_STATUSES,
        **SECURITY_ERROR_STATUSES,
        **SCHEMA_ERROR_STATUSES,
        **TRANSACTION_ERROR_STATUSES,
        **TOPIC_POLICY_ERROR_STATUSES,
    }
    middlewares = [
        namespace_middleware(authorizer.tenancy),
        authorization_middleware(authorizer),
        redirect_middleware(topics),
    ]
    if authenticator is not None:
        middlewares.insert(0, authentication_middleware(authenticator))
    return new_app(routes, statuses, middlewares)


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.registry = new_registry()
        self.storage: KafkaStorage | None = None
        self.broker: Broker | None = None
        self.listener: Listener | None = None
        self.http: HttpEndpoint | None = None
        self.retention: RetentionChecker | None = None
        self.backlog_quotas: BacklogQuotaChecker | None = None
        self.cluster: Cluster | None = None
        self.listeners: AdvertisedListeners | None = None
        self.ready = False
        """Serving: started and not shutting down (the health check says so)."""
        self.tls: ServerTls | None = None
        self.address: BrokerAddress | None = None

    async def start(self) -> None:
        config = self.config
        authenticator = validate_settings(config)
        self.tls = tls = server_tls(config)
        context = tls.context if tls is not None else None
        two_phase = config.topic_two_phase_deletion_enabled
        self.storage = storage = await KafkaStorage.start(
            config, two_phase_deleter if two_phase else None
        )
        if isinstance(storage.deleter, TwoPhaseLedgerDeleter):
            storage.deleter.register_metrics(self.registry)
        policies = Policies(storage.policies)
        key_metrics = KeyDedupMetrics(self.registry)
        key_store = KeyStore(
            config.redis_url,
            timeout_seconds=config.key_deduplication_redis_timeout_seconds,
            cluster=config.redis_cluster_enabled,
            observe=key_metrics.observe_redis,
            connection=config.redis_connection(),
        )
        key_dedup = KeyDedupService(config, key_store, policies, key_metrics)
        await storage.admin.create_topic_when_ready(
            owners_topic(config.cluster_name),
            {"retention.ms": "3600000"},
            partitions=config.cluster_ownership_slots,
        )
        self.cluster = cluster = Cluster(
            config, storage.acquire_fence, broker_client_credentials(config)
        )
        self.registry.register(
            ClusterMetrics(config.cluster_name, config.cluster_ownership_slots, cluster)
        )
        self.registry.register(KafkaClientErrors())
        self.broker = broker = Broker(
            config,
            storage,
            policies,
            BrokerMetrics(self.registry),
            key_dedup,
            cluster,
            SchemaRegistry(config, policies),
        )
        await broker.namespaces.adopt_stored_namespaces()
        broker.start()
        authorizer = Authorizer(config, Tenancy(storage.policies, config))
        self.listeners = listeners = AdvertisedListeners(config, storage.policies)
        self.listener = listener = Listener(
            config,
            broker,
            SessionMetrics(self.registry),
            authenticator,
            authorizer,
            context,
            listeners,
        )
        await listener.start()
        self.retention = RetentionChecker(config, broker.topic_registry.loaded_ledgers)
        self.retention.start()
        loaded = broker.topic_registry.topics
        self.backlog_quotas = BacklogQuotaChecker(config, policies, lambda: list(loaded.values()))
        self.backlog_quotas.start()
        self.http = http = await start_http(
            http_app(
                broker,
                self.registry,
                storage,
                authenticator,
                authorizer,
                lambda: self.ready,
                listeners,
            ),
            config.bind_address,
            config.web_service_port,
            config.web_service_port_tls,
            context,
        )
        if tls is not None:
            tls.start()
        self.address = address = BrokerAddress(
            config.advertised_address,
            listener.port or 0,
            http.port or 0,
            uuid.uuid4().hex[:12],
            listener.tls_port,
            http.tls_port,
        )
        listeners.bind(address)
        await cluster.start(address, broker.unload_slots)
        await self._register()
        self.ready = True
        urls = [listener.service_url_tls, address.web_url_tls]
        if listener.port is not None:
            urls.insert(0, listener.service_url)
        if http.port is not None:
            urls.insert(-1, f"http://{config.advertised_address}:{http.port}")
        log.info(
            "dedup-broker ready: %s, Kafka %s",
            ", ".join(u for u in urls if u),
            config.kafka_bootstrap_servers,
        )

    def _registry_key(self) -> str:
        port = self.config.broker_service_port
        return broker_key(
            self.config.advertised_address,
            port if port is not None else self.config.broker_service_port_tls or 0,
        )

    async def _register(self) -> None:
        """Announce this broker's admin URL (deletion workers ask it about ledgers)."""
        assert self.storage is not None and self.address is not None
        url = self.address.web_url
        assert self.listeners is not None
        listeners = {name: urls.to_json() for name, urls in self.listeners.own.items()}
        await self.storage.policies.put(
            self._registry_key(), broker_record(url, self.storage.broker_id, listeners)
        )

    async def stop(self) -> None:
        """Graceful and bounded (``brokerShutdownTimeoutMs``): stop accepting, tell clients
        to go, finish writes in flight, store cursors and PIP-6 snapshots; whatever is not
        done by the deadline is abandoned (a restart recovers it from the log)."""
        self.ready = False
        deadline = time.monotonic() + self.config.broker_shutdown_timeout_ms / 1000
        try:
            await asyncio.wait_for(self._drain(), self.config.broker_shutdown_timeout_ms / 1000)
        except TimeoutError:
            log.error(
                "graceful shutdown did not finish within %d ms; stopping anyway",
                self.config.broker_shutdown_timeout_ms,
            )
        if self.listener is not None:
            await self.listener.close()
        if self.http is not None:
            await self.http.stop()
        if self.tls is not None:
            await self.tls.stop()
        if self.storage is not None:
            await self.storage.close(max(deadline - time.monotonic(), 1.0))

    async def _drain(self) -> None:
        if self.listener is not None:
            self.listener.stop_accepting()
        if self.retention is not None:
            await self.retention.stop()
        if self.backlog_quotas is not None:
            await self.backlog_quotas.stop()
        if self.storage is not None:
            try:
                await self.storage.policies.delete(self._registry_key())
            except BrokerError as exc:
                log.warning("unregistering the broker failed: %s", exc)
        if self.cluster is not None:
            await self.cluster.leave()
            if self.broker is not None:  # clients told where their topics went
                await self.broker.topic_registry.handovers.sent(HANDOVER_WAIT_SECONDS)
            await self.cluster.close()
        if self.broker is not None:
            await self.broker.close()

    async def run_until_signalled(self) -> None:
        """Serve until SIGINT/SIGTERM, then shut down within ``brokerShutdownTimeoutMs``."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if tracemalloc.is_tracing():  # PYTHONTRACEMALLOC: allocation reports on SIGUSR1
            loop.add_signal_handler(signal.SIGUSR1, AllocationReports().report)
        await self.start()
        freeze_startup_heap()
        try:
            await stop.wait()
        finally:
            log.info("shutting down")
            await self.stop()
            log.info("stopped")


def freeze_startup_heap() -> None:
    """What start-up built (modules, configuration, the app's own objects) lives as long
    as the process: moved out of the garbage collector's reach, so that a full collection
    walks only what serving made since. Without it each full collection walked about
    85,000 objects, 40 ms with the event loop stopped."""
    gc.collect()
    gc.freeze()


def serve(config: BrokerConfig) -> None:
    """Run the broker until SIGINT/SIGTERM on a loop of its own.

    Unlike ``asyncio.run``, closing does not wait for the default executor's threads: one
    may be blocked in a Kafka call that only its own timeout ends (Kafka unreachable),
    and the shutdown must stay within ``brokerShutdownTimeoutMs``."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(BrokerApp(config).run_until_signalled())
    finally:
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
