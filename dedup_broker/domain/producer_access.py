"""Who may produce on a topic: Pulsar's producer access modes (PIP-68).

Shared producers coexist; an exclusive producer is the topic's only one. Each time a
producer takes exclusive access the *topic epoch* grows, so a producer that lost access
(fenced by another) cannot come back with its old epoch: it learns it was fenced. A
``WaitForExclusive`` producer queues until the topic has no producer left, then takes
access in arrival order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping

from dedup_broker.domain.producer import Producer, ProducerAccessMode
from dedup_broker.errors import PermanentError

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

    def __init__(self, topic: str, epoch: int | None) -> None:
        self.topic = topic
        self.epoch = epoch
        """The topic epoch (``None`` until a producer first takes exclusive access)."""
        self.exclusive: Producer | None = None
        self.waiting: deque[tuple[Producer, asyncio.Future[int]]] = deque()

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
