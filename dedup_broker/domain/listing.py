"""Which topics a namespace holds: stored non-partitioned topics and the partitions of its
partitioned topics, and the pattern consumers' watches of namespaces. Topics live only in
namespaces that exist (``Tenancy``)."""

from __future__ import annotations

import logging
from urllib.parse import unquote

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.partitioned import PARTITIONS_KEY, PartitionedTopics
from dedup_broker.domain.topic_list import TopicListWatches
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.namespace_policies import max_topics_per_namespace
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import PermanentError
from dedup_broker.security.authorization import Tenancy
from dedup_broker.storage.api import StorageService

log = logging.getLogger(__name__)


class TopicLimitError(PermanentError):
    """The namespace holds ``maxTopicsPerNamespace`` topics already."""


class NamespaceListing:
    def __init__(self, config: BrokerConfig, storage: StorageService) -> None:
        self.config = config
        self._storage = storage
        self.tenancy = Tenancy(storage.policies, config)
        self.partitioned = PartitionedTopics(
            config, storage, self.check_topic_limit, self.tenancy.require_namespace
        )
        self.clustered = False
        """Other brokers create and delete topics too: read the tables afresh to list."""
        self.watches = TopicListWatches(self._listing)
        """Pattern consumers' watches of namespaces (topics created or deleted later)."""

    def check_topic_limit(self, name: TopicName, new_topics: int) -> None:
        """Raises unless ``name``'s namespace may hold ``new_topics`` more topics (its
        ``maxTopicsPerNamespace``, else the broker's)."""
        policies = Policies(self._storage.policies)
        limit = max_topics_per_namespace(policies, self.config, name.namespace_name)
        if limit and len(self.topics_of_namespace(name.namespace_name)) + new_topics > limit:
            raise TopicLimitError(
                f"Exceed maximum number of topics in namespace {name.namespace_name} "
                f"(maxTopicsPerNamespace={limit})"
            )

    async def require_namespace(self, namespace: str) -> None:
        """Raise ``NamespaceNotFoundError`` (``TopicNotFound``, HTTP 404) unless the
        namespace and its tenant exist."""
        await self.tenancy.require_namespace(namespace)

    async def adopt_stored_namespaces(self) -> list[str]:
        """Create the namespaces (and tenants) that hold stored topics but were never
        created (topics stored before namespaces had to exist): their topics stay
        reachable. Returns the namespaces created."""
        holding = {
            name.namespace_name
            for ledger in self._storage.list_managed_ledgers()
            if (name := TopicName.from_managed_ledger_name(ledger)) is not None
        }
        for key, _ in self._storage.policies.items(PARTITIONS_KEY):
            try:
                holding.add(TopicName.parse(key[len(PARTITIONS_KEY) :]).namespace_name)
            except PermanentError:
                continue
        adopted = sorted(ns for ns in holding if self.tenancy.namespace(ns) is None)
        for namespace in adopted:
            await self.tenancy.adopt(namespace)
            log.warning("namespace %s holds topics but was never created: created now", namespace)
        return adopted

    def list_topics(self, namespace: str) -> list[str]:
        """Non-partitioned topics and partitions stored in a namespace."""
        tenant, _, ns = namespace.partition("/")
        prefix = f"{tenant}/{ns}/persistent/"
        names = []
        for ledger_name in self._storage.list_managed_ledgers():
            if ledger_name.startswith(prefix):
                names.append(f"persistent://{namespace}/{unquote(ledger_name[len(prefix) :])}")
        return sorted(names)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        """Non-partitioned topics and every partition of the partitioned topics, as this
        broker last read them."""
        topics = set(self.list_topics(namespace))
        for base in self.partitioned.list_partitioned_topics(namespace):
            partitions = self.partitioned.partitions_of(TopicName.parse(base))
            topics.update(f"{base}-partition-{i}" for i in range(partitions))
        return sorted(topics)

    async def refresh_listing(self) -> None:
        """In a cluster other brokers create and delete topics: read the tables afresh
        before answering a listing."""
        if self.clustered:
            await self._storage.refresh()

    async def current_topics_of_namespace(self, namespace: str) -> list[str]:
        """``topics_of_namespace`` as stored now: topics other brokers created included."""
        await self.refresh_listing()
        return self.topics_of_namespace(namespace)

    async def _listing(self, namespace: str, refresh: bool) -> list[str]:
        if refresh:
            return await self.current_topics_of_namespace(namespace)
        return self.topics_of_namespace(namespace)
