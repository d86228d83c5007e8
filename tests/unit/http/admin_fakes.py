"""A small in-process stand-in for the broker, for unit tests of the admin routes' HTTP
handling (statuses, bodies, error shapes); integration tests use a real broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.partitioned import TopicExistsError
from dedup_broker.domain.subscription_errors import ConsumerStillConnectedError
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import OffloadInProgressError, TopicNotFoundError
from dedup_broker.key_dedup.metrics import KeyDedupMetrics
from dedup_broker.key_dedup.service import KeyDedupService, TopicDirectory
from dedup_broker.key_dedup.store import KeyStore
from dedup_broker.metrics_registry import new_registry
from dedup_broker.schema.registry import SchemaRegistry
from dedup_broker.session.metrics import SessionMetrics
from dedup_broker.storage.values import LedgerStatus, LedgerType, Position
from harness.memory_table import MemoryTable

if TYPE_CHECKING:
    from dedup_broker.domain.broker import Broker


@dataclass
class FakeSubscription:
    consumers: list[object] = field(default_factory=list)


@dataclass
class FakeOffloads:
    running: bool = False
    triggered: list[Position] = field(default_factory=list)
    checks: int = 0

    def trigger(self, before: Position) -> None:
        if self.running:
            raise OffloadInProgressError("an offload of this topic is running")
        self.triggered.append(before)

    def check_soon(self) -> None:
        self.checks += 1


@dataclass
class FakeLedger:
    offloads: FakeOffloads = field(default_factory=FakeOffloads)


@dataclass
class FakeTopic:
    name: TopicName
    subscriptions: dict[str, FakeSubscription] = field(default_factory=dict)
    managed_ledger: FakeLedger = field(default_factory=FakeLedger)

    def stats(self) -> dict[str, Any]:
        return {"msgInCounter": 3, "subscriptions": sorted(self.subscriptions)}

    async def unsubscribe(self, name: str) -> None:
        subscription = self.subscriptions.get(name)
        if subscription is not None and subscription.consumers:
            raise ConsumerStillConnectedError(f"subscription {name} has consumers")
        self.subscriptions.pop(name, None)


class FakeBroker:
    """Topics are the ones a test adds; policies are real, on an in-memory table."""

    def __init__(self) -> None:
        self.config = BrokerConfig()
        self.cluster = None
        self.registry = new_registry()
        self.metrics = BrokerMetrics(self.registry)
        self.session_metrics = SessionMetrics(self.registry)
        self.policies = Policies(MemoryTable().as_metadata_table())
        self.schemas = SchemaRegistry(self.config, self.policies)
        store = KeyStore(self.config.redis_url)
        self.key_dedup = KeyDedupService(
            self.config, store, self.policies, KeyDedupMetrics(self.registry)
        )
        self.topics: dict[str, FakeTopic] = {}
        self.key_dedup.bind(self.as_directory())
        self.connections: set[object] = set()
        self._partitions: dict[str, int] = {}
        self.policy_applications = 0
        # The broker's collaborators, played by this one object.
        self.topic_registry = self.namespaces = self.partitioned_topics = self
        self.partitioned = self

    def as_broker(self) -> Broker:
        return cast("Broker", self)

    def as_directory(self) -> TopicDirectory:
        return cast("TopicDirectory", self)

    def loaded_key_dedups(self) -> list[object]:
        return []

    async def apply_key_dedup_policies(self) -> None:
        pass

    def add_topic(self, name: str) -> FakeTopic:
        topic = FakeTopic(TopicName.parse(name))
        self.topics[str(topic.name)] = topic
        return topic

    def topic_exists(self, name: TopicName) -> bool:
        return str(name) in self.topics

    def check_served(self, name: TopicName) -> None:
        """A single broker serves every topic."""

    async def refresh_listing(self) -> None:
        """Nothing else changes the topics."""

    async def partitioned_metadata(self, name: TopicName) -> int:
        return self.partitions_of(name)

    async def get_topic(self, name: TopicName) -> FakeTopic:
        return self.topics.get(str(name)) or self.add_topic(str(name))

    async def loaded(self, name: TopicName) -> FakeTopic:
        if not self.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.get_topic(name)

    def loaded_ledgers(self) -> list[tuple[TopicName, FakeLedger]]:
        return [(topic.name, topic.managed_ledger) for topic in self.topics.values()]

    async def owner_of(self, name: TopicName) -> None:
        return None

    async def ledger_status(
        self, name: str, ledger_id: int, ledger_type: LedgerType = LedgerType.LEDGER, uid: str = ""
    ) -> LedgerStatus:
        """No topic here holds a ledger."""
        return LedgerStatus.DELETABLE

    def partitions_of(self, name: TopicName) -> int:
        return self._partitions.get(str(name), 0)

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        if self.partitions_of(name):
            raise TopicExistsError(f"partitioned topic {name} already exists")
        self._partitions[str(name)] = partitions

    def topics_of_namespace(self, namespace: str) -> list[str]:
        return sorted(t for t in self.topics if TopicName.parse(t).namespace_name == namespace)

    async def apply_policies(self) -> None:
        self.policy_applications += 1
