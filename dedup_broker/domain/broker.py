"""The broker service: the listener, the topics it serves, partitioned-topic metadata."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from itertools import count
from typing import TYPE_CHECKING

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.domain.names import TopicName
from dedup_broker.domain.policies import Policies
from dedup_broker.domain.topic import Topic
from dedup_broker.errors import BrokerError, InvalidTopicNameError, TopicNotFoundError
from dedup_broker.key_dedup.service import KeyDedupService
from dedup_broker.session.connection import ClientConnection

if TYPE_CHECKING:
    from dedup_broker.storage.service import StorageService

log = logging.getLogger(__name__)

PARTITIONS_KEY = "partitioned-topics/"
PERIODIC_SECONDS = 5.0


class PartitionedTopicError(BrokerError):
    """A partitioned topic is addressed where one of its partitions is required."""


class BrokerService:
    def __init__(self, config: BrokerConfig, storage: StorageService) -> None:
        self.config = config
        self.storage = storage
        self.metrics = BrokerMetrics(self)
        self.policies = Policies(storage.policies, config)
        self.key_dedup = KeyDedupService(self)
        self._timer: asyncio.Task[None] | None = None
        self.topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self.connections: set[ClientConnection] = set()
        self._server: asyncio.Server | None = None
        self._instance = uuid.uuid4().hex[:10]
        self._producer_counter = count()
        self.port = config.broker_service_port

    # --- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ClientConnection(self),
            self.config.bind_address,
            self.config.broker_service_port,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._timer = loop.create_task(self._periodic())
        log.info("serving the Pulsar protocol on %s:%d", self.config.bind_address, self.port)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except BrokerError as exc:
                log.warning("closing %s: %s", topic.name, exc)
        self.topics.clear()
        await self.key_dedup.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _periodic(self) -> None:
        """Housekeeping: quiet-topic snapshots, idle producers, failed recoveries."""
        while True:
            await asyncio.sleep(PERIODIC_SECONDS)
            for topic in list(self.topics.values()):
                try:
                    topic.dedup.on_timer()
                    if topic.dedup.status == "Failed":
                        await topic.dedup.apply_policy()
                except BrokerError as exc:
                    log.warning("housekeeping on %s: %s", topic.name, exc)

    async def apply_policies(self) -> None:
        """Policies changed at runtime: every loaded topic follows them now."""
        for topic in list(self.topics.values()):
            await topic.dedup.apply_policy()

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_address}:{self.port}"

    def connection_opened(self, connection: ClientConnection) -> None:
        self.connections.add(connection)
        self.metrics.connections_opened.inc()

    def connection_closed(self, connection: ClientConnection) -> None:
        self.connections.discard(connection)
        self.metrics.connections_closed.inc()

    def new_producer_name(self) -> str:
        """Broker-generated producer names are unique across brokers and restarts."""
        return f"{self.config.cluster_name}-{self._instance}-{next(self._producer_counter)}"

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
            raise BrokerError(f"the number of partitions must be > 0, got {partitions}")
        current = self.partitions_of(name)
        if current:
            raise TopicExistsError(f"partitioned topic {name} already exists")
        if self.storage.managed_ledger_exists(name.managed_ledger_name):
            raise TopicExistsError(f"non-partitioned topic {name} already exists")
        await self.storage.policies.put(
            PARTITIONS_KEY + str(name), json.dumps({"partitions": partitions}).encode()
        )

    async def update_partitions(self, name: TopicName, partitions: int) -> None:
        current = self.partitions_of(name)
        if not current:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        if partitions <= current:
            raise BrokerError(
                f"partitions can only be increased: {name} has {current}, asked {partitions}"
            )
        await self.storage.policies.put(
            PARTITIONS_KEY + str(name), json.dumps({"partitions": partitions}).encode()
        )

    def list_partitioned_topics(self, namespace: str) -> list[str]:
        prefix = f"{PARTITIONS_KEY}persistent://{namespace}/"
        return sorted(key[len(PARTITIONS_KEY) :] for key, _ in self.storage.policies.items(prefix))

    def list_topics(self, namespace: str) -> list[str]:
        """Non-partitioned topics and partitions stored in a namespace."""
        tenant, _, ns = namespace.partition("/")
        prefix = f"{tenant}/{ns}/persistent/"
        names = []
        for ledger_name in self.storage.list_managed_ledgers():
            if ledger_name.startswith(prefix):
                from urllib.parse import unquote

                names.append(f"persistent://{namespace}/{unquote(ledger_name[len(prefix) :])}")
        return sorted(names)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        topics = set(self.list_topics(namespace))
        for base in self.list_partitioned_topics(namespace):
            partitions = self.partitions_of(TopicName.parse(base))
            topics.update(f"{base}-partition-{i}" for i in range(partitions))
        return sorted(topics)

    # --- topics ---------------------------------------------------------------------
    def topic_exists(self, name: TopicName) -> bool:
        return str(name) in self.topics or self.storage.managed_ledger_exists(
            name.managed_ledger_name
        )

    async def get_topic(self, name: TopicName, for_producer: bool = False) -> Topic:
        """The loaded topic, loading (and, if allowed, creating) it on first use."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
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
                topic = await Topic.load(self, name, create=create)
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

    def _may_create(self, name: TopicName) -> bool:
        if name.is_partition:
            base = name.partitioned_base
            partitions = self.partitions_of(base)
            if partitions:
                if name.partition_index >= partitions:
                    raise TopicNotFoundError(
                        f"{base} has {partitions} partitions; {name} does not exist"
                    )
                return True
        return self.config.allow_auto_topic_creation

    async def delete_topic(self, name: TopicName, force: bool = False) -> None:
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

    async def delete_partitioned_topic(self, name: TopicName, force: bool = False) -> None:
        partitions = self.partitions_of(name)
        if not partitions:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        for index in range(partitions):
            partition = name.partition(index)
            if self.topic_exists(partition):
                await self.delete_topic(partition, force=force)
        await self.storage.policies.delete(PARTITIONS_KEY + str(name))


class TopicExistsError(BrokerError):
    """The topic (or partitioned topic) already exists."""


class TopicBusyError(BrokerError):
    """The topic has producers or consumers attached."""
