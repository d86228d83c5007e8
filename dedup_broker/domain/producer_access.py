"""Who may produce on a topic: Pulsar's producer access modes (PIP-68).

Shared producers coexist; an exclusive producer is the topic's only one. Each time a
producer takes exclusive access the *topic epoch* grows, so a producer that lost access
(fenced by another) cannot come back with its old epoch: it learns it was fenced. A
``WaitForExclusive`` producer queues until the topic has no producer left, then takes
access in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.termination import TopicTerminatedError
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.producer import Producer, ProducerAccessMode
from dedup_broker.errors import PermanentError, ServiceNotReadyError
from dedup_broker.lazy import LazyDeque
from dedup_broker.storage.api import Position

log = logging.getLogger(__name__)

TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"
"""The managed-ledger property holding the topic epoch (the name Pulsar stores it under)."""


class ProducerBusyError(PermanentError):
    """The producer name is taken, or the topic has an exclusive producer (for a Shared
    one)."""


class ProducerFencedError(PermanentError):
    """Exclusive access is held by another producer, or was taken since this producer's
    epoch: the producer may not publish."""


class ProducerClosedError(PermanentError):
    """The producer was closed while it waited for exclusive access."""


class ProducerAccess:
    """The exclusive holder, the queue of waiting producers and the epoch of one topic."""

    __slots__ = ("epoch", "exclusive", "waiting")

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch
        """The topic epoch (``None`` until a producer first takes exclusive access)."""
        self.exclusive: Producer | None = None
        self.waiting: LazyDeque[tuple[Producer, asyncio.Future[int]]] = LazyDeque()

    def admit(
        self, producer: Producer, attached: Mapping[str, Producer]
    ) -> int | asyncio.Future[int] | None:
        """The epoch the producer attaches with, or a future of it when it must wait.

        ``attached`` are the producers on the topic now (those of an
        ``ExclusiveWithFencing`` producer's predecessors already fenced out).
        """
        mode = producer.access_mode
        if mode is ProducerAccessMode.SHARED:
            if self.exclusive is not None or self.waiting:
                raise ProducerBusyError(
                    f"Topic has an existing exclusive producer: {self._holder_name()}"
                )
            return self.epoch
        if mode is ProducerAccessMode.EXCLUSIVE:
            if self.exclusive is not None or self.waiting:
                raise ProducerFencedError(
                    f"Topic has an existing exclusive producer: {self._holder_name()}"
                )
            if attached:
                raise ProducerFencedError("Topic has existing shared producers")
            return self._take(producer)
        if mode is ProducerAccessMode.WAIT_FOR_EXCLUSIVE and (self.exclusive or attached):
            waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self.waiting.append((producer, waiter))
            return waiter
        return self._take(producer)

    def fence_waiting(self) -> list[Producer]:
        """An ``ExclusiveWithFencing`` producer arrives: every waiting producer fails."""
        fenced = []
        while self.waiting:
            producer, waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(ProducerFencedError("Fenced out"))
            fenced.append(producer)
        return fenced

    def released(
        self,
        producer: Producer,
        attached: Mapping[str, Producer],
        register: Callable[[Producer], None],
    ) -> None:
        """``producer`` left (it was attached or waiting); with no producer left, the next
        waiting one takes exclusive access and is ``register``-ed at once."""
        for index, (waiting, waiter) in enumerate(self.waiting):
            if waiting is producer:
                del self.waiting[index]
                if not waiter.done():
                    waiter.set_exception(ProducerClosedError("closed while waiting"))
                break
        if self.exclusive is producer:
            self.exclusive = None
        while self.waiting and self.exclusive is None and not attached:
            successor, waiter = self.waiting.popleft()
            if waiter.done():
                continue
            try:
                epoch = self._take(successor)
            except ProducerFencedError as exc:
                waiter.set_exception(exc)
                continue
            register(successor)
            waiter.set_result(epoch)

    def fail_waiting(self, error: BaseException) -> None:
        """The topic goes away: every waiting producer gets ``error``."""
        while self.waiting:
            _, waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    def _take(self, producer: Producer) -> int:
        current = -1 if self.epoch is None else self.epoch
        asked = producer.topic_epoch
        if asked is not None and asked < current:
            raise ProducerFencedError(
                f"Topic epoch has already moved. Current epoch: {current}, Producer epoch: {asked}"
            )
        self.exclusive = producer
        self.epoch = asked if asked is not None else current + 1
        return self.epoch

    def _holder_name(self) -> str:
        if self.exclusive is not None:
            return self.exclusive.name
        return self.waiting[0][0].name if self.waiting else "?"


class ProducerHost:
    """The producers of one topic under their access modes; each kind of topic (persistent,
    non-persistent) adds what it does when a producer comes or goes."""

    __slots__ = (
        "access",
        "closed",
        "config",
        "name",
        "producer_limit",
        "producers",
        "terminated_at",
    )

    def __init__(self, name: TopicName, config: BrokerConfig, epoch: int | None) -> None:
        self.name = name
        self.config = config
        self.producers: dict[str, Producer] = {}
        self.access = ProducerAccess(epoch)
        self.closed = False
        self.terminated_at: Position | None = None
        """The last position of a terminated topic (it takes no producer any more)."""
        self.producer_limit: Callable[[], int] = lambda: config.max_producers_per_topic
        """The producers the topic takes now (0: no limit); a kind of topic with
        policies reads its own."""

    def check_open(self) -> None:
        """A topic unloaded meanwhile (handover, shutdown) takes no new clients: they look
        it up again and attach where it is served now."""
        if self.closed:
            raise ServiceNotReadyError(f"topic {self.name} was unloaded; look it up again")

    def add_producer(self, producer: Producer) -> None:
        """Attach a Shared producer (nothing to wait for, no epoch to store)."""
        if producer.access_mode is not ProducerAccessMode.SHARED:
            raise ValueError("exclusive producers attach with attach_producer()")
        self.check_open()
        self._check_name_free(producer)
        self.access.admit(producer, self.producers)
        self._register(producer)

    async def attach_producer(
        self, producer: Producer, queued: Callable[[], None] | None = None
    ) -> int | None:
        """Attach ``producer`` under its access mode; returns the topic epoch it holds.

        A ``WaitForExclusive`` producer that must wait is announced through ``queued``,
        then the call returns once it holds exclusive access.
        """
        if self.terminated_at is not None:
            raise TopicTerminatedError(f"Topic {self.name} was already terminated")
        limit = self.producer_limit()
        if limit and len(self.producers) >= limit:
            raise ProducerBusyError(
                f"Topic {self.name} reached max producers limit (maxProducersPerTopic={limit})"
            )
        if producer.access_mode is ProducerAccessMode.SHARED:
            self.add_producer(producer)
            return self.access.epoch
        self.check_open()
        self._check_name_free(producer)
        if producer.access_mode is ProducerAccessMode.EXCLUSIVE_WITH_FENCING:
            self.access.fence_waiting()
            for fenced in list(self.producers.values()):
                log.info("%s: producer %s fenced out by %s", self.name, fenced.name, producer.name)
                self.remove_producer(fenced)
                fenced.link.close_producer(fenced)
        admitted = self.access.admit(producer, self.producers)
        if isinstance(admitted, asyncio.Future):
            if queued is not None:
                queued()
            return await admitted  # registered by whoever released the topic
        self._register(producer)
        if admitted is not None:
            try:
                await self._store_epoch(admitted)
            except BaseException:
                self.remove_producer(producer)
                raise
        return admitted

    def _check_name_free(self, producer: Producer) -> None:
        existing = self.producers.get(producer.name)
        if existing is not None and not existing.closed:
            raise ProducerBusyError(
                f"producer {producer.name!r} is already connected to topic {self.name}"
            )

    def _register(self, producer: Producer) -> None:
        self.producers[producer.name] = producer
        self._producer_connected(producer)

    def remove_producer(self, producer: Producer) -> None:
        producer.closed = True
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self._producer_disconnected(producer)
        if not self.closed:
            self.access.released(producer, self.producers, self._register)

    # --- what a kind of topic adds ------------------------------------------------------
    async def _store_epoch(self, epoch: int) -> None:
        """Keep the epoch beyond this load of the topic (nothing to keep by default)."""

    def _producer_connected(self, producer: Producer) -> None:
        """A producer was registered."""

    def _producer_disconnected(self, producer: Producer) -> None:
        """A registered producer left."""
