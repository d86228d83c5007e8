"""The topics this broker serves, persistent and non-persistent: loading (one load per
name at a time), lookups, unloading and deletion."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster, NotOwnerError
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.handovers import Handovers
from dedup_broker.domain.listing import NamespaceListing
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.non_persistent.topic import NonPersistentTopic
from dedup_broker.domain.topic import Topic, TopicServices, apply_key_dedup_policy
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.names import TopicDomain, TopicName
from dedup_broker.domain_base.namespace_policies import AutoTopicCreation, auto_topic_creation
from dedup_broker.errors import (
    InvalidTopicNameError,
    PermanentError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from dedup_broker.key_dedup.topic import TopicKeyDedup
from dedup_broker.schema.registry import SchemaRegistry
from dedup_broker.storage.api import ManagedLedger, StorageService

log = logging.getLogger(__name__)

PartitionDeleter = Callable[[TopicName, bool], Awaitable[None]]
"""Deletes a partition served by another broker (the HTTP layer asks its owner)."""

ServedTopic = Topic | NonPersistentTopic
"""What producers and consumers attach to: a persistent topic or a non-persistent one."""


class PartitionedTopicError(PermanentError):
    """A partitioned topic is addressed where one of its partitions is required."""


class TopicBusyError(PermanentError):
    """The topic has producers or consumers attached."""


class TopicRegistry:
    def __init__(
        self,
        services: TopicServices,
        storage: StorageService,
        metrics: BrokerMetrics,
        namespaces: NamespaceListing,
        schemas: SchemaRegistry,
        cluster: Cluster | None,
    ) -> None:
        self.config: BrokerConfig = services.config
        self._services = services
        self._storage = storage
        self._metrics = metrics
        self._namespaces = namespaces
        self._partitioned = namespaces.partitioned
        self._schemas = schemas
        self.cluster = cluster
        """Bundle ownership; ``None``: this broker serves every topic (unit tests)."""
        self.topics: dict[str, Topic] = {}
        self.non_persistent: dict[str, NonPersistentTopic] = {}
        """Live non-persistent topics, by name (in memory only: gone after a restart)."""
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._unloading: dict[str, asyncio.Future[None]] = {}
        """Topics being closed: a use of the same name waits for the close to end, so that
        the topic loaded next never shares the managed ledger the closing one still holds."""
        self.closing = False
        self.handovers = Handovers(self.config, cluster)

    # --- ownership ------------------------------------------------------------------
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

    def serves(self, name: TopicName) -> bool:
        cluster = self.cluster
        return cluster is None or cluster.owns_slot(cluster.slot_of(name))

    # --- lookups and loading ----------------------------------------------------------
    def topic_exists(self, name: TopicName) -> bool:
        if not name.is_persistent:
            return str(name) in self.non_persistent
        return str(name) in self.topics or self._storage.managed_ledger_exists(
            name.managed_ledger_name
        )

    async def serve(self, name: TopicName) -> ServedTopic:
        """The topic a producer or consumer attaches to, of either domain (only in a
        namespace that exists: ``TopicNotFoundError`` otherwise)."""
        if name.is_persistent:
            return await self.get_topic(name)
        if str(name) not in self.non_persistent:
            await self._namespaces.require_namespace(name.namespace_name)
        return self.non_persistent_topic(name)

    async def loaded(self, name: TopicName) -> Topic:
        """An existing persistent topic this broker serves, loaded now if it is not."""
        self.check_served(name)
        if not self.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.get_topic(name)

    def non_persistent_topic(self, name: TopicName, create: bool = True) -> NonPersistentTopic:
        """The live non-persistent topic, made now if allowed (``create``, and
        ``allowAutoTopicCreation`` or a partition of a partitioned topic). It is owned by
        the broker that owns its bundle, as a persistent topic is."""
        key = str(name)
        topic = self.non_persistent.get(key)
        if topic is not None:
            return topic
        if self.closing:
            raise ServiceNotReadyError("the broker is shutting down")
        self.check_served(name)
        self._check_not_partitioned(name)
        if not create or not self._may_create_non_persistent(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        topic = NonPersistentTopic(name, self.config, self._metrics.non_persistent)
        self.non_persistent[key] = topic
        return topic

    def _check_not_partitioned(self, name: TopicName) -> None:
        if self._partitioned.partitions_of(name) > 0:
            raise PartitionedTopicError(
                f"{name} is a partitioned topic: address its partitions ({name}-partition-N)"
            )

    def _may_create_non_persistent(self, name: TopicName) -> bool:
        return self._is_declared_partition(name) or self._auto_creation(name).allowed

    def _auto_creation(self, name: TopicName) -> AutoTopicCreation:
        """The namespace's ``autoTopicCreation`` override, else the broker's settings."""
        policies = self._services.policies
        return auto_topic_creation(policies, self.config, name.namespace_name)

    def _is_declared_partition(self, name: TopicName) -> bool:
        """A partition of a partitioned topic (``TopicNotFoundError`` past its count)."""
        if not name.is_partition:
            return False
        base = name.partitioned_base
        partitions = self._partitioned.partitions_of(base)
        if partitions and name.partition_index >= partitions:
            raise TopicNotFoundError(f"{base} has {partitions} partitions; {name} does not exist")
        return partitions > 0

    async def get_topic(self, name: TopicName) -> Topic:
        """The loaded topic, loading (and, if allowed, creating) it on first use; topics
        are loaded only in namespaces that exist."""
        if not name.is_persistent:
            raise InvalidTopicNameError(f"{name} is not a persistent topic")
        key = str(name)
        if key not in self.topics:
            await self._namespaces.require_namespace(name.namespace_name)
        while (unloading := self._unloading.get(key)) is not None:
            await asyncio.shield(unloading)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if self.closing:
            raise ServiceNotReadyError("the broker is shutting down")
        if self.cluster is not None:
            self.cluster.check_owned(name)
        self._check_not_partitioned(name)
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
            return await Topic.load(self._services, self._storage, name, create=create)
        slot = self.cluster.check_owned(name)
        fence = await self.cluster.fence_for(slot)
        await self._storage.policies.refresh()
        topic = await Topic.load(self._services, self._storage, name, create=create, fence=fence)
        if not self.cluster.owns_slot(slot):  # revoked while loading
            await topic.close()
            self.cluster.check_owned(name)
        return topic

    def _may_create(self, name: TopicName) -> bool:
        if self._is_declared_partition(name):
            return True
        if not self._auto_creation(name).allowed:
            return False
        if not self._storage.managed_ledger_exists(name.managed_ledger_name):
            self._namespaces.check_topic_limit(name, 1)
        return True

    # --- what key deduplication's scopes need to know -------------------------------------
    def topics_of_namespace(self, namespace: str) -> list[str]:
        return self._namespaces.topics_of_namespace(namespace)

    def partitions_of(self, name: TopicName) -> int:
        return self._partitioned.partitions_of(name)

    # --- what is loaded ---------------------------------------------------------------
    def loaded_ledgers(self) -> list[tuple[TopicName, ManagedLedger]]:
        return [(t.name, t.managed_ledger) for t in self.topics.values()]

    async def apply_policies(self) -> None:
        """Deduplication policies changed at runtime: every loaded topic follows them now."""
        for topic in list(self.topics.values()):
            await topic.dedup.apply_policy()

    async def key_dedup_of(self, name: TopicName) -> TopicKeyDedup:
        return (await self.get_topic(name)).key_dedup

    def loaded_key_dedups(self) -> list[TopicKeyDedup]:
        return [t.made_key_dedup for t in self.topics.values() if t.made_key_dedup is not None]

    async def apply_key_dedup_policies(self) -> None:
        for topic in list(self.topics.values()):
            await apply_key_dedup_policy(topic)

    def non_persistent_topics_of_namespace(self, namespace: str) -> list[str]:
        """The non-persistent topics live on this broker in a namespace."""
        prefix = f"{TopicDomain.NON_PERSISTENT}://{namespace}/"
        return sorted(key for key in self.non_persistent if key.startswith(prefix))

    # --- unloading and deleting ---------------------------------------------------------
    async def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic; its clients reconnect here at once (told so: the topic
        stays on this broker) and find it loaded again once the close has ended."""
        topic: ServedTopic | None = self.topics.pop(str(name), None)
        if topic is None:
            topic = self.non_persistent.pop(str(name), None)
        if topic is not None:
            here = self.handovers.here()
            await self._close_unloaded([topic], lambda _: here, raise_errors=True)

    async def unload_slots(self, slots: frozenset[int]) -> None:
        """The slots went to another broker: unload their topics (writes settled,
        snapshots and cursors stored); their clients are told to go to the slot's new
        owner once the group names it (or to look the topic up, if that takes long)."""
        cluster = self.cluster
        assert cluster is not None
        keys = [k for k, t in self.topics.items() if cluster.slot_of(t.name) in slots]
        leaving: list[ServedTopic] = [self.topics.pop(key) for key in keys]
        live = self.non_persistent
        keys = [k for k, t in live.items() if cluster.slot_of(t.name) in slots]
        leaving.extend(live.pop(key) for key in keys)
        await self._close_unloaded(leaving, self.handovers.of_slots())
        if leaving:
            log.info("unloaded %d topics of slots %s", len(leaving), sorted(slots))

    async def _close_unloaded(
        self,
        topics: list[ServedTopic],
        destination: Callable[[TopicName], Destination | None],
        raise_errors: bool = False,
    ) -> None:
        """Close topics taken out of the maps, each name marked as unloading meanwhile."""
        loop = asyncio.get_running_loop()
        marks = {str(t.name): loop.create_future() for t in topics}
        self._unloading.update(marks)
        try:
            results = await asyncio.gather(
                *(t.close(destination(t.name)) for t in topics), return_exceptions=True
            )
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

    async def drop_idle_non_persistent(self, idle_seconds: float) -> list[str]:
        """Non-persistent topics without producers or subscriptions for ``idle_seconds``
        go away (Pulsar's inactive-topic cleanup); returns their names."""
        idle = [k for k, t in self.non_persistent.items() if t.idle_for() >= idle_seconds]
        for key in idle:
            await self.non_persistent.pop(key).close()
        return idle

    async def close(self) -> None:
        """Unload every topic (clients told to go, cursors and snapshots stored)."""
        self.closing = True
        topics: list[ServedTopic] = [*self.topics.values(), *self.non_persistent.values()]
        self.topics.clear()
        self.non_persistent.clear()
        await _close_all(topics, "closing")

    async def delete_topic(self, name: TopicName, force: bool = False) -> None:
        """Delete a topic and, unless it is a partition, its schemas and policies (a
        partitioned topic's go with the partitioned topic, as in Pulsar)."""
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
        if not self._storage.managed_ledger_exists(name.managed_ledger_name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        await self._storage.delete_managed_ledger(name.managed_ledger_name)
        if not name.is_partition:
            await self._schemas.delete(name)
            await self._services.policies.forget_topic(name)

    async def delete_partitioned_topic(
        self, name: TopicName, force: bool = False, elsewhere: PartitionDeleter | None = None
    ) -> None:
        """Delete every partition (those served by other brokers through ``elsewhere``),
        then the partitioned topic's metadata and schemas."""
        partitions = self._partitioned.partitions_of(name)
        if not partitions:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        for index in range(partitions):
            partition = name.partition(index)
            if not self.serves(partition):
                if elsewhere is None:
                    raise NotOwnerError(partition)
                await elsewhere(partition, force)
            elif self.topic_exists(partition):
                await self.delete_topic(partition, force=force)
        await self._partitioned.remove(name)
        await self._schemas.delete(name)
        await self._services.policies.forget_topic(name)


async def _close_all(topics: list[ServedTopic], doing: str) -> None:
    results = await asyncio.gather(*(t.close() for t in topics), return_exceptions=True)
    for topic, result in zip(topics, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("%s %s: %s", doing, topic.name, result)
