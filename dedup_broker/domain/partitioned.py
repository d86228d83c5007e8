"""Partitioned topics: their metadata (the number of partitions), stored in the policies
table under ``partitioned-topics/{topic}`` as Pulsar stores it in its metadata store."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicDomain, TopicName
from dedup_broker.domain_base.namespace_policies import auto_topic_creation
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import InvalidTopicNameError, PermanentError, TopicNotFoundError
from dedup_broker.storage.api import StorageService
from dedup_broker.transactions.service import ASSIGN_TOPIC

PARTITIONS_KEY = "partitioned-topics/"


class InvalidPartitionsError(PermanentError):
    """A partition count that cannot be set (not positive, or not an increase)."""


class TopicExistsError(PermanentError):
    """The topic (or partitioned topic) already exists."""


TopicLimit = Callable[[TopicName, int], None]
"""Raises unless the namespace of the name may hold that many more topics."""
NamespaceCheck = Callable[[str], Awaitable[None]]
"""Raises ``TopicNotFoundError`` unless the namespace (``tenant/ns``) exists."""


class PartitionedTopics:
    def __init__(
        self,
        config: BrokerConfig,
        storage: StorageService,
        limit: TopicLimit,
        require_namespace: NamespaceCheck,
    ) -> None:
        self.config = config
        self._storage = storage
        self._policies = Policies(storage.policies)
        self._limit = limit
        self._require_namespace = require_namespace
        self.clustered = False
        """Other brokers may change the metadata too: read the table afresh when asked."""

    def partitions_of(self, name: TopicName) -> int:
        raw = self._storage.policies.get(PARTITIONS_KEY + str(name))
        if raw is None:
            return 0
        return int(json.loads(raw)["partitions"])

    def list_partitioned_topics(
        self, namespace: str, domain: TopicDomain = TopicDomain.PERSISTENT
    ) -> list[str]:
        prefix = f"{PARTITIONS_KEY}{domain}://{namespace}/"
        items = self._storage.policies.items(prefix)
        return sorted(key[len(PARTITIONS_KEY) :] for key, _ in items)

    async def partitioned_metadata(self, name: TopicName) -> int:
        """Partitions of ``name`` as stored now (another broker may have just created,
        grown or deleted it). A topic of a namespace that does not exist has none:
        ``TopicNotFoundError``, as Pulsar answers."""
        await self._require_namespace(name.namespace_name)
        if self.clustered:
            await self._storage.policies.refresh()
        partitions = self.partitions_of(name)
        if partitions == 0 and self._auto_created_partitions(name):
            try:
                await self.create_partitioned_topic(name, self._auto_created_partitions(name))
            except TopicExistsError:  # created meanwhile (through another broker)
                await self._storage.policies.refresh()
            partitions = self.partitions_of(name)
        return partitions

    def _auto_created_partitions(self, name: TopicName) -> int:
        """Partitions a topic nobody created gets when a client asks for them (0: none):
        the coordinators' assign topic with transactions on (Pulsar makes it when a cluster
        is initialized), and any topic where automatic creation makes partitioned topics
        (the namespace's ``autoTopicCreation``, else ``allowAutoTopicCreationType``)."""
        if name == ASSIGN_TOPIC and self.config.transaction_coordinator_enabled:
            return self.config.transaction_coordinator_count
        creation = auto_topic_creation(self._policies, self.config, name.namespace_name)
        if not (creation.allowed and creation.partitioned) or name.is_partition:
            return 0
        exists = self._storage.managed_ledger_exists(name.managed_ledger_name)
        return 0 if exists else creation.partitions

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        if name.is_partition:
            raise InvalidTopicNameError(f"{name} is a partition name; use the base topic name")
        if partitions <= 0:
            raise InvalidPartitionsError(f"the number of partitions must be > 0, got {partitions}")
        await self._require_namespace(name.namespace_name)
        current = self.partitions_of(name)
        if current:
            raise TopicExistsError(f"partitioned topic {name} already exists")
        if self._storage.managed_ledger_exists(name.managed_ledger_name):
            raise TopicExistsError(f"non-partitioned topic {name} already exists")
        self._limit(name, partitions)
        await self._store(name, partitions)

    async def update_partitions(self, name: TopicName, partitions: int) -> None:
        current = self.partitions_of(name)
        if not current:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        if partitions <= current:
            raise InvalidPartitionsError(
                f"partitions can only be increased: {name} has {current}, asked {partitions}"
            )
        await self._store(name, partitions)

    async def _store(self, name: TopicName, partitions: int) -> None:
        value = json.dumps({"partitions": partitions}).encode()
        await self._storage.policies.put(PARTITIONS_KEY + str(name), value)

    async def remove(self, name: TopicName) -> None:
        """Forget the metadata (its partitions are deleted already)."""
        await self._storage.policies.delete(PARTITIONS_KEY + str(name))
