"""Which topics a namespace holds: stored non-partitioned topics and the partitions of its
partitioned topics, and the pattern consumers' watches of namespaces."""

from __future__ import annotations

from urllib.parse import unquote

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.partitioned import PartitionedTopics
from dedup_broker.domain.topic_list import TopicListWatches
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import PermanentError
from dedup_broker.storage.api import StorageService


class TopicLimitError(PermanentError):
    """The namespace holds ``maxTopicsPerNamespace`` topics already."""


class NamespaceListing:
    def __init__(self, config: BrokerConfig, storage: StorageService) -> None:
        self.config = config
        self._storage = storage
        self.partitioned = PartitionedTopics(config, storage, self.check_topic_limit)
        self.clustered = False
        """Other brokers create and delete topics too: read the tables afresh to list."""
        self.watches = TopicListWatches(self._listing)
        """Pattern consumers' watches of namespaces (topics created or deleted later)."""

    def check_topic_limit(self, name: TopicName, new_topics: int) -> None:
        """Raises unless ``name``'s namespace may hold ``new_topics`` more topics."""
        limit = self.config.max_topics_per_namespace
        if limit and len(self.topics_of_namespace(name.namespace_name)) + new_topics > limit:
            raise TopicLimitError(
                f"Exceed maximum number of topics in namespace {name.namespace_name} "
                f"(maxTopicsPerNamespace={limit})"
            )

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
