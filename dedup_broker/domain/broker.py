"""The broker: the topics it serves (``registry.py``), what namespaces hold
(``listing.py``, ``partitioned.py``), and its housekeeping.

It owns no socket: the session layer accepts clients and calls in; the app wires it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from itertools import count

from dedup_broker.cluster.service import Cluster
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.listing import NamespaceListing
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.non_persistent.topic import IDLE_SECONDS
from dedup_broker.domain.registry import TopicRegistry
from dedup_broker.domain.topic import Topic, TopicServices
from dedup_broker.domain.topic_rates import RatedTopic, StatsUpdates
from dedup_broker.domain.transaction_endings import TopicEndings
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import BrokerError
from dedup_broker.key_dedup.service import KeyDedupService
from dedup_broker.periodic import PeriodicTask
from dedup_broker.schema.registry import SchemaRegistry
from dedup_broker.storage.api import StorageService
from dedup_broker.transactions.service import TransactionCoordinators

log = logging.getLogger(__name__)

HOUSEKEEPING_SECONDS = 5.0


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        storage: StorageService,
        policies: Policies,
        metrics: BrokerMetrics,
        key_dedup: KeyDedupService,
        cluster: Cluster | None = None,
        schemas: SchemaRegistry | None = None,
    ) -> None:
        self.config = config
        self.schemas = schemas if schemas is not None else SchemaRegistry(config, policies)
        """Topics' schema versions (the app passes the one its routes share)."""
        self.cluster = cluster
        """Bundle ownership; ``None``: this broker serves every topic (unit tests)."""
        self.storage = storage
        self.policies = policies
        self.metrics = metrics
        self.key_dedup = key_dedup
        self.services = TopicServices(config, policies, metrics, key_dedup)
        self.namespaces = NamespaceListing(config, storage)
        self.partitioned_topics = self.namespaces.partitioned
        self.namespaces.clustered = self.partitioned_topics.clustered = cluster is not None
        self.topic_registry = TopicRegistry(
            self.services, storage, metrics, self.namespaces, self.schemas, cluster
        )
        self._housekeeping: asyncio.Task[None] | None = None
        self.stats_updates = StatsUpdates(
            self.rated_topics, stored=lambda: list(self.topic_registry.topics.values())
        )
        self._stats_task = PeriodicTask(
            "stats update", config.stats_update_frequency_in_secs, self.update_stats
        )
        self._instance = uuid.uuid4().hex[:10]
        self._producer_counter = count()
        self.transaction_endings = TopicEndings(self.topic_registry, cluster)
        self.transactions = TransactionCoordinators(
            config, storage, cluster, self.transaction_endings, metrics.registry
        )
        key_dedup.bind(self.topic_registry)
        non_persistent = self.topic_registry.non_persistent
        self.topic_metrics = metrics.watch_topics(
            config, lambda: self.topic_registry.topics.values(), non_persistent.values
        )
        metrics.non_persistent.watch_topics(lambda: list(non_persistent.values()))

    @property
    def topics(self) -> dict[str, Topic]:
        """The loaded persistent topics, by name."""
        return self.topic_registry.topics

    def new_producer_name(self) -> str:
        """Broker-generated producer names are unique across brokers and restarts."""
        return f"{self.config.cluster_name}-{self._instance}-{next(self._producer_counter)}"

    async def unload_slots(self, slots: frozenset[int]) -> None:
        """The slots went to another broker: their topics and coordinators leave here."""
        await self.transactions.unload_slots(slots)
        await self.topic_registry.unload_slots(slots)

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._housekeeping = asyncio.get_running_loop().create_task(self._periodic())
        self._stats_task.start()

    async def close(self) -> None:
        """Unload every topic (clients told to go, cursors and snapshots stored)."""
        self.topic_registry.closing = True
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        await self._stats_task.stop()
        await self.namespaces.watches.close()
        await self.transactions.close()
        await self.topic_registry.close()
        await self.key_dedup.close()

    async def update_stats(self) -> None:
        """Rates are sampled and the write buckets' period closes at the same moment."""
        await self.stats_updates.update()
        for topic in list(self.topic_registry.topics.values()):
            topic.write_stats.roll()

    def rated_topics(self) -> list[RatedTopic]:
        """The loaded topics, persistent and not, whose rates the stats update samples."""
        registry = self.topic_registry
        return [*registry.topics.values(), *registry.non_persistent.values()]

    async def _periodic(self) -> None:
        registry = self.topic_registry
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            if self.cluster is not None:
                try:  # policies another broker changed apply here too
                    await self.storage.policies.refresh()
                    await registry.apply_policies()
                except BrokerError as exc:
                    log.warning("refreshing policies: %s", exc)
            for topic in list(registry.topics.values()):
                try:
                    await topic.housekeeping()
                except BrokerError as exc:
                    log.warning("housekeeping on %s: %s", topic.name, exc)
            await registry.drop_idle_non_persistent(IDLE_SECONDS)
