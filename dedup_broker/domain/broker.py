"""The broker: the topics it serves, their loading and partitioned-topic metadata.

It owns no socket: the session layer accepts clients and calls in; the app wires it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from itertools import count
from urllib.parse import unquote

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster, NotOwnerError
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.names import TopicDomain, TopicName
from dedup_broker.domain.non_persistent.topic import IDLE_SECONDS, NonPersistentTopic
from dedup_broker.domain.policies import Policies
from dedup_broker.domain.topic import Topic, TopicServices
from dedup_broker.domain.topic_list import TopicListWatches
from dedup_broker.errors import (
    BrokerError,
    InvalidTopicNameError,
    PermanentError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from dedup_broker.key_dedup.service import KeyDedupService
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.schema.registry import SchemaRegistry
from dedup_broker.storage.managed_ledger import ManagedLedger
from dedup_broker.storage.service import StorageService

log = logging.getLogger(__name__)

PARTITIONS_KEY = "partitioned-topics/"
PartitionDeleter = Callable[[TopicName, bool], Awaitable[None]]
"""Deletes a partition served by another broker (the HTTP layer asks its owner)."""
HOUSEKEEPING_SECONDS = 5.0

ServedTopic = Topic | NonPersistentTopic
"""What producers and consumers attach to: a persistent topic or a non-persistent one."""


class PartitionedTopicError(PermanentError):
    """A partitioned topic is addressed where one of its partitions is required."""


class InvalidPartitionsError(PermanentError):
    """A partition count that cannot be set (not positive, or not an increase)."""


class TopicExistsError(PermanentError):
    """The topic (or partitioned topic) already exists."""


class TopicLimitError(PermanentError):
    """The namespace holds ``maxTopicsPerNamespace`` topics already."""


class TopicBusyError(PermanentError):
    """The topic has producers or consumers attached."""


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
        self.topics: dict[str, Topic] = {}
        self.non_persistent: dict[str, NonPersistentTopic] = {}
        """Live non-persistent topics, by name (in memory only: gone after a restart)."""
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._unloading: dict[str, asyncio.Future[None]] = {}
        """Topics being closed: a use of the same name waits for the close to end, so that
        the topic loaded next never shares the managed ledger the closing one still holds."""
        self._housekeeping: asyncio.Task[None] | None = None
        self._closing = False
        self._instance = uuid.uuid4().hex[:10]
        self._producer_counter = count()
        self.topic_watches = TopicListWatches(self._listing)
        """Pattern consumers' watches of namespaces (topics created or deleted later)."""
        key_dedup.bind(self)
        metrics.watch_topics(lambda: list(self.topics.values()))
        metrics.non_persistent.watch_topics(lambda: list(self.non_persistent.values()))

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._housekeeping = asyncio.get_running_loop().create_task(self._periodic())

    async def close(self) -> None:
        """Unload every topic (clients told to go, cursors and snapshots stored)."""
        self._closing = True
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        await self.topic_watches.close()
        topics: list[ServedTopic] = [*self.topics.values(), *self.non_persistent.values()]
        self.topics.clear()
        self.non_persistent.clear()
        results = await asyncio.gather(*(t.close() for t in topics), return_exceptions=True)
        for topic, result in zip(topics, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("closing %s: %s", topic.name, result)
        await self.key_dedup.close()

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            if self.cluster is not None:
                try:  # policies another broker changed apply here too
                    await self.storage.policies.refresh()
                    await self.apply_policies()
                except BrokerError as exc:
                    log.warning("refreshing policies: %s", exc)
            for topic in list(self.topics.values()):
                try:
                    await topic.housekeeping()
                except BrokerError as exc:
                    log.warning("housekeeping on %s: %s", topic.name, exc)
            await self.drop_idle_non_persistent(IDLE_SECONDS)

    async def drop_idle_non_persistent(self, idle_seconds: float) -> list[str]:
        """Non-persistent topics without producers or subscriptions for ``idle_seconds``
        go away (Pulsar's inactive-topic cleanup); returns their names."""
        idle = [k for k, t in self.non_persistent.items() if t.idle_for() >= idle_seconds]
        for key in idle:
            await self.non_persistent.pop(key).close()
        return idle

    async def apply_policies(self) -> None:
        """Deduplication policies changed at runtime: every loaded topic follows them now."""
        for topic in list(self.topics.values()):
            await topic.dedup.apply_policy()

    def new_producer_name(self) -> str:
        """Broker-generated producer names are unique across brokers and restarts."""
        return f"{self.config.cluster_name}-{self._instance}-{next(self._producer_counter)}"

    def loaded_ledgers(self) -> list[tuple[TopicName, ManagedLedger]]:
        return [(t.name, t.managed_ledger) for t in self.topics.values()]

    # --- key deduplication's view of the topics -------------------------------------
    async def key_dedup_of(self, name: TopicName) -> TopicKeyDedup:
        return (await self.get_topic(name)).key_dedup

    def loaded_key_dedups(self) -> list[TopicKeyDedup]:
        return [t.key_dedup for t in self.topics.values()]

    # --- the cluster ----------------------------------------------------------------
    async def owner_of(self, name: TopicName) -> BrokerAddress | None:
        """The broker serving ``name``; ``None`` when it is this one."""
        if self.cluster is None:
            return None
        owner = await self.cluster.owner_of(name)
        return None if owner == self.cluster.address else owner

    def check_served(self, name: TopicName) -> None:
        """Raise ``NotOwnerError`` (HTTP: 307 to the owner) unless this broker serves it."""
        if self.cluster is not None:
            self.cluster.check_owned(name)

    async def unload_slots(self, slots: frozenset[int]) -> None:
        """The slots went to another broker: unload their topics (clients told to go,
        writes settled, snapshots and cursors stored)."""
        assert self.cluster is not None
        keys = [k for k, t in self.topics.items() if self.cluster.slot_of(t.name) in slots]
        leaving: list[ServedTopic] = [self.topics.pop(key) for key in keys]
        live = self.non_persistent
        keys = [k for k, t in live.items() if self.cluster.slot_of(t.name) in slots]
        leaving.extend(live.pop(key) for key in keys)
        await self._close_unloaded(leaving)
        if leaving:
            log.info("unloaded %d topics of slots %s", len(leaving), sorted(slots))

    async def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic; its clients reconnect (and may land on another broker)."""
        topic: ServedTopic | None = self.topics.pop(str(name), None)
        if topic is None:
            topic = self.non_persistent.pop(str(name), None)
        if topic is not None:
            await self._close_unloaded([topic], raise_errors=True)

    async def _close_unloaded(self, topics: list[ServedTopic], raise_errors: bool = False) -> None:
        """Close topics taken out of the map, each name marked as unloading meanwhile."""
        loop = asyncio.get_running_loop()
        marks = {str(t.name): loop.create_future() for t in topics}
        self._unloading.update(marks)
        try:
            results = await asyncio.gather(*(t.close() for t in topics), return_exceptions=True)
        finally:
            for key, mark in marks.items():
                if self._unloading.get(key) is mark:
                    del self._unloading[key]
                mark.set_result(None)
        for topic, result in zip(topics, results, strict=True):
            if isinstance(result, BaseException):
                if raise_errors:
                    raise result
                log.warning("unloading %s: %s", topic.name, result)

    async def refresh_listing(self) -> None:
        """In a cluster other brokers create and delete topics: read the tables afresh
        before answering a listing."""
        if self.cluster is not None:
            await self.storage.refresh()

    async def partitioned_metadata(self, name: TopicName) -> int:
        """Partitions of ``name`` as stored now (another broker may have just created,
        grown or deleted it)."""
        if self.cluster is not None:
            await self.storage.policies.refresh()
        partitions = self.partitions_of(name)
        if partitions == 0 and self._auto_creates_partitioned(name):
            try:
                await self.create_partitioned_topic(name, self.config.default_num_partitions)
            except TopicExistsError:  # created meanwhile (through another broker)
                await self.storage.policies.refresh()
            partitions = self.partitions_of(name)
        return partitions

    def _auto_creates_partitioned(self, name: TopicName) -> bool:
        """Pulsar's ``allowAutoTopicCreationType=partitioned``: a client asking for the
        partitions of a topic nobody created makes it a partitioned topic."""
        return (
            self.config.allow_auto_topic_creation
            and self.config.allow_auto_topic_creation_type == "partitioned"
            and not name.is_partition
            and not self.storage.managed_ledger_exists(name.managed_ledger_name)
        )

    def _check_topic_limit(self, name: TopicName, new_topics: int) -> None:
        limit = self.config.max_topics_per_namespace
        if limit and len(self.topics_of_namespace(name.namespace_name)) + new_topics > limit:
            raise TopicLimitError(
                f"Exceed maximum number of topics in namespace {name.namespace_name} "
                f"(maxTopicsPerNamespace={limit})"
            )

    # --- partitioned topics ---------------------------------------------------------
    def partitions_of(self, name: TopicName) -> int:
        raw = self.storage.policies.get(PARTITIONS_KEY + str(name))
        if raw is None:
            return 0
        return int(json.loads(raw)["partitions"])

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        if name.is_partition:
            raise InvalidTopicNameError(f"{name} is a partition name; use the base topic name")
        if partitions <= 0:
            raise InvalidPartitionsError(f"the number of partitions must be > 0, got {partitions}")
        current = self.partitions_of(name)
        if current:
            raise TopicExistsError(f"partitioned topic {name} already exists")
        if self.storage.managed_ledger_exists(name.managed_ledger_name):
            raise TopicExistsError(f"non-partitioned topic {name} already exists")
        self._check_topic_limit(name, partitions)
        await self.storage.policies.put(
            PARTITIONS_KEY + str(name), json.dumps({"partitions": partitions}).encode()
        )

    async def update_partitions(self, name: TopicName, partitions: int) -> None:
        current = self.partitions_of(name)
        if not current:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        if partitions <= current:
            raise InvalidPartitionsError(
                f"partitions can only be increased: {name} has {current}, asked {partitions}"
            )
        await self.storage.policies.put(
            PARTITIONS_KEY + str(name), json.dumps({"partitions": partitions}).encode()
        )

    def list_partitioned_topics(
        self, namespace: str, domain: TopicDomain = TopicDomain.PERSISTENT
    ) -> list[str]:
        prefix = f"{PARTITIONS_KEY}{domain}://{namespace}/"
        return sorted(key[len(PARTITIONS_KEY) :] for key, _ in self.storage.policies.items(prefix))

    def list_topics(self, namespace: str) -> list[str]:
        """Non-partitioned topics and partitions stored in a namespace."""
        tenant, _, ns = namespace.partition("/")
        prefix = f"{tenant}/{ns}/persistent/"
        names = []
        for ledger_name in self.storage.list_managed_ledgers():
            if ledger_name.startswith(prefix):
                names.append(f"persistent://{namespace}/{unquote(ledger_name[len(prefix) :])}")
        return sorted(names)

    async def _listing(self, namespace: str, refresh: bool) -> list[str]:
        if refresh:
            return await self.current_topics_of_namespace(namespace)
        return self.topics_of_namespace(namespace)

    async def current_topics_of_namespace(self, namespace: str) -> list[str]:
        """``topics_of_namespace`` as stored now: topics other brokers created included."""
        await self.refresh_listing()
        return self.topics_of_namespace(namespace)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        """Non-partitioned topics and every partition of the partitioned topics, as this
        broker last read them."""
        topics = set(self.list_topics(namespace))
        for base in self.list_partitioned_topics(namespace):
            partitions = self.partitions_of(TopicName.parse(base))
            topics.update(f"{base}-partition-{i}" for i in range(partitions))
        return sorted(topics)

    def non_persistent_topics_of_namespace(self, namespace: str) -> list[str]:
        """The non-persistent topics live on this broker in a namespace."""
        prefix = f"{TopicDomain.NON_PERSISTENT}://{namespace}/"
        return sorted(key for key in self.non_persistent if key.startswith(prefix))

    # --- topics ---------------------------------------------------------------------
    def topic_exists(self, name: TopicName) -> bool:
        if not name.is_persistent:
            return str(name) in self.non_persistent
        return str(name) in self.topics or self.storage.managed_ledger_exists(
            name.managed_ledger_name
        )

    async def serve(self, name: TopicName) -> ServedTopic:
        """The topic a producer or consumer attaches to, of either domain."""
        if name.is_persistent:
            return await self.get_topic(name)
        return self.non_persistent_topic(name)

    def non_persistent_topic(self, name: TopicName, create: bool = True) -> NonPersistentTopic:
        """The live non-persistent topic, made now if allowed (``create``, and
        ``allowAutoTopicCreation`` or a partition of a partitioned topic). It is owned by
        the broker that owns its bundle, as a persistent topic is."""
        key = str(name)
        topic = self.non_persistent.get(key)
        if topic is not None:
            return topic
        if self._closing:
            raise ServiceNotReadyError("the broker is shutting down")
        self.check_served(name)
        if self.partitions_of(name) > 0:
            raise PartitionedTopicError(
                f"{name} is a partitioned topic: address its partitions ({name}-partition-N)"
            )
        if not create or not self._may_create_non_persistent(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        topic = NonPersistentTopic(name, self.config, self.metrics.non_persistent)
        self.non_persistent[key] = topic
        return topic

    def _may_create_non_persistent(self, name: TopicName) -> bool:
        return self._is_declared_partition(name) or self.config.allow_auto_topic_creation

    def _is_declared_partition(self, name: TopicName) -> bool:
        """A partition of a partitioned topic (``TopicNotFoundError`` past its count)."""
        if not name.is_partition:
            return False
        base = name.partitioned_base
        partitions = self.partitions_of(base)
        if partitions and name.partition_index >= partitions:
            raise TopicNotFoundError(f"{base} has {partitions} partitions; {name} does not exist")
        return partitions > 0

    async def get_topic(self, name: TopicName) -> Topic:
        """The loaded topic, loading (and, if allowed, creating) it on first use."""
        if not name.is_persistent:
            raise InvalidTopicNameError(f"{name} is not a persistent topic")
        key = str(name)
        while (unloading := self._unloading.get(key)) is not None:
            await asyncio.shield(unloading)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if self._closing:
            raise ServiceNotReadyError("the broker is shutting down")
        if self.cluster is not None:
            self.cluster.check_owned(name)
        if self.partitions_of(name) > 0:
            raise PartitionedTopicError(
                f"{name} is a partitioned topic: address its partitions ({name}-partition-N)"
            )
        create = self._may_create(name)
        loading = self._loading.get(key)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._loading[key] = loading
            try:
                topic = await self._load(name, create)
                self.topics[key] = topic
                loading.set_result(topic)
            except BaseException as exc:
                loading.set_exception(exc)
                loading.exception()  # retrieved here; waiters get it too
                raise
            finally:
                del self._loading[key]
            return topic
        return await asyncio.shield(loading)

    async def _load(self, name: TopicName, create: bool) -> Topic:
        if self.cluster is None:
            return await Topic.load(self.services, self.storage, name, create=create)
        slot = self.cluster.check_owned(name)
        fence = await self.cluster.fence_for(slot)
        await self.storage.policies.refresh()
        topic = await Topic.load(self.services, self.storage, name, create=create, fence=fence)
        if not self.cluster.owns_slot(slot):  # revoked while loading
            await topic.close()
            self.cluster.check_owned(name)
        return topic

    def _may_create(self, name: TopicName) -> bool:
        if self._is_declared_partition(name):
            return True
        if not self.config.allow_auto_topic_creation:
            return False
        if not self.storage.managed_ledger_exists(name.managed_ledger_name):
            self._check_topic_limit(name, 1)
        return True

    async def delete_topic(self, name: TopicName, force: bool = False) -> None:
        """Delete a topic and, unless it is a partition, its schemas (a partitioned
        topic's schemas go with the partitioned topic, as in Pulsar)."""
        self.check_served(name)
        if not name.is_persistent:
            live = self.non_persistent.get(str(name))
            if live is None:
                raise TopicNotFoundError(f"topic {name} does not exist")
            if live.busy and not force:
                raise TopicBusyError(f"topic {name} has connected producers or consumers")
            await self.non_persistent.pop(str(name)).close()
            return
        topic = self.topics.get(str(name))
        if topic is not None:
            busy = bool(topic.producers) or any(s.consumers for s in topic.subscriptions.values())
            if busy and not force:
                raise TopicBusyError(f"topic {name} has connected producers or consumers")
            await topic.close()
            self.topics.pop(str(name), None)
        if not self.storage.managed_ledger_exists(name.managed_ledger_name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        await self.storage.delete_managed_ledger(name.managed_ledger_name)
        if not name.is_partition:
            await self.schemas.delete(name)

    async def delete_partitioned_topic(
        self, name: TopicName, force: bool = False, elsewhere: PartitionDeleter | None = None
    ) -> None:
        """Delete every partition (those served by other brokers through ``elsewhere``),
        then the partitioned topic's metadata and schemas."""
        partitions = self.partitions_of(name)
        if not partitions:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        for index in range(partitions):
            partition = name.partition(index)
            if self.cluster is not None and not self.cluster.owns_slot(
                self.cluster.slot_of(partition)
            ):
                if elsewhere is None:
                    raise NotOwnerError(partition)
                await elsewhere(partition, force)
            elif self.topic_exists(partition):
                await self.delete_topic(partition, force=force)
        await self.storage.policies.delete(PARTITIONS_KEY + str(name))
        await self.schemas.delete(name)
