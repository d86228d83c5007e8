"""One dispatcher per subscription type: who may join, who is active, who gets an entry.

``Exclusive`` and ``Failover`` have one active consumer (``active_consumers.py``) and keep
the order of the log: a redelivery rewinds the cursor. ``Failover`` lets several consumers
join, tells them which one is active and hands over after a delay.
``Shared`` spreads entries round-robin over the consumers with permits and redelivers
single positions out of order; ``Key_Shared`` does the same but gives every key to one
consumer (``key_shared.py``). The persistent subscription (``subscription.py``) and the
non-persistent one (``non_persistent/topic.py``) both ask their dispatcher; the type of a
subscription changes only while it has no consumers, and its dispatcher with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.active_consumers import elect_active
from dedup_broker.domain.consumer import Consumer, ConsumerBusyError, SubscriptionType
from dedup_broker.domain.key_hash import key_hash
from dedup_broker.domain.key_shared import KeySharedRouting, entry_key
from dedup_broker.domain_base.names import TopicName
from dedup_broker.storage.api import Entry, ManagedCursor, ManagedLedger, Position

HandOver = Callable[[bool], None]
"""A persistent subscription's part when its active consumer changed: dispatch again,
after a rewind of the cursor when another consumer was active before (True)."""


class Rounds(Protocol):
    """The two ways a persistent subscription runs a dispatch round."""

    async def dispatch_in_order(self) -> bool:
        """Entries from the replay set, the compacted view or the cursor, in order."""
        ...

    async def dispatch_by_key(self, routing: KeySharedRouting[Consumer]) -> bool:
        """Entries to the owners of their keys' slots."""
        ...


class Dispatcher:
    """Shared by every type: no active consumer, round-robin over those that can take."""

    __slots__ = ("_next", "active", "partition_index", "topic")

    type: ClassVar[SubscriptionType]
    redelivers_singly: ClassVar[bool] = False
    """Shared and Key_Shared redeliver positions; the others rewind the cursor."""
    delays: ClassVar[bool] = False
    """Shared and Key_Shared hold a message until its delivery time."""

    def __init__(self, topic: TopicName) -> None:
        self.topic = str(topic)
        self.partition_index = topic.partition_index
        self.active: Consumer | None = None
        self._next = 0

    def admit(self, consumer: Consumer, consumers: Sequence[Consumer]) -> None:
        """``consumer`` joins ``consumers`` (raises if it may not)."""

    def joining(
        self,
        consumer: Consumer,
        consumers: Sequence[Consumer],
        cursor: ManagedCursor,
        ledger: ManagedLedger,
    ) -> None:
        """A persistent subscription's consumer joins where its cursor stands."""

    def removed(self, consumer: Consumer) -> None:
        """``consumer`` left."""

    def elect(self, consumers: Sequence[Consumer], hand_over: HandOver | None = None) -> None:
        """Choose the active consumer (Exclusive, Failover) among ``consumers`` (the
        subscription's own list, as it stays)."""
        self.active = None

    def targets(
        self, consumers: Sequence[Consumer], can_take: Callable[[Consumer], bool]
    ) -> list[Consumer]:
        """The consumers that may receive now."""
        return [c for c in consumers if can_take(c)]

    def pick(self, targets: list[Consumer]) -> Consumer:
        """The next of ``targets`` to receive an entry (round-robin over permits)."""
        if len(targets) == 1:
            return targets[0]
        for _ in range(len(targets)):
            self._next = (self._next + 1) % len(targets)
            candidate = targets[self._next]
            if candidate.permits > 0:
                return candidate
        return max(targets, key=lambda c: c.permits)

    def taker(self, entry: Entry, consumers: Sequence[Consumer]) -> Consumer | None:
        """Non-persistent topics: who takes ``entry`` now, if anyone (round-robin over the
        consumers ready for it)."""
        for step in range(len(consumers)):
            candidate = consumers[(self._next + step) % len(consumers)]
            if ready(candidate):
                self._next = (self._next + step + 1) % len(consumers)
                return candidate
        return None

    async def dispatch(self, rounds: Rounds) -> bool:
        return await rounds.dispatch_in_order()

    def describe(self, consumer: Consumer, stats: dict[str, object]) -> dict[str, object]:
        """The consumer's stats with what this type knows of it added."""
        return stats

    def forget(self, position: Position) -> None:
        """The entry at ``position`` is acknowledged."""

    def forget_up_to(self, position: Position) -> None:
        """Everything up to ``position`` is acknowledged."""

    def clear(self) -> None:
        """The subscription was reset (seek)."""


class ExclusiveDispatcher(Dispatcher):
    __slots__ = ()
    type = SubscriptionType.EXCLUSIVE

    def admit(self, consumer: Consumer, consumers: Sequence[Consumer]) -> None:
        if consumers:
            name = consumer.subscription_name
            raise ConsumerBusyError(f"exclusive subscription {name!r} already has a consumer")

    def elect(self, consumers: Sequence[Consumer], hand_over: HandOver | None = None) -> None:
        self.active = elect_active(consumers, self.partition_index, self.topic, False)

    def targets(
        self, consumers: Sequence[Consumer], can_take: Callable[[Consumer], bool]
    ) -> list[Consumer]:
        active = self.active
        return [active] if active and active.permits > 0 and active.writable else []

    def taker(self, entry: Entry, consumers: Sequence[Consumer]) -> Consumer | None:
        return self.active if self.active is not None and ready(self.active) else None


class FailoverDispatcher(ExclusiveDispatcher):
    """When another consumer becomes active (the first one too), Pulsar sends nothing for
    ``activeConsumerFailoverDelayTimeMillis``: the one active before acknowledges what it
    had received meanwhile, so that the rewound cursor sends the new one only the rest.
    Then every consumer is told which one is active, and dispatch goes on."""

    __slots__ = ("_rewind_due", "_switch", "consistent_hashing", "delay")
    type = SubscriptionType.FAILOVER

    def __init__(self, topic: TopicName, delay: float = 0.0, consistent_hashing: bool = False):
        super().__init__(topic)
        self.delay = delay
        self.consistent_hashing = consistent_hashing
        self._switch: asyncio.TimerHandle | None = None
        self._rewind_due = False

    def admit(self, consumer: Consumer, consumers: Sequence[Consumer]) -> None:
        """Any number may join; one is active."""

    def elect(self, consumers: Sequence[Consumer], hand_over: HandOver | None = None) -> None:
        """``hand_over`` (persistent subscriptions) comes after the delay; without it the
        consumers are only told (non-persistent ones)."""
        previous = self.active
        self.active = elect_active(
            consumers, self.partition_index, self.topic, self.consistent_hashing
        )
        if self.active is previous:
            return
        self._rewind_due |= previous is not None
        if self.active is None:
            return
        if hand_over is None or self.delay <= 0:
            self._switched(consumers, hand_over)
        elif self._switch is None:  # as Pulsar: a change meanwhile does not put it off
            loop = asyncio.get_running_loop()
            self._switch = loop.call_later(self.delay, self._switched, consumers, hand_over)

    def _switched(self, consumers: Sequence[Consumer], hand_over: HandOver | None) -> None:
        self._switch = None
        if self.active is None:
            return  # all left; the next one to join is handed over to
        rewind, self._rewind_due = self._rewind_due, False
        for consumer in consumers:
            consumer.link.active_consumer_changed(consumer, consumer is self.active)
        if hand_over is not None:
            hand_over(rewind)

    def targets(
        self, consumers: Sequence[Consumer], can_take: Callable[[Consumer], bool]
    ) -> list[Consumer]:
        return [] if self._switch is not None else super().targets(consumers, can_take)


class SharedDispatcher(Dispatcher):
    """Round-robin within the best ``priority_level`` (0 first) that has permits left:
    consumers of a lower priority receive only while every higher one is full, as in
    Pulsar."""

    __slots__ = ()
    type = SubscriptionType.SHARED
    redelivers_singly = True
    delays = True

    def pick(self, targets: list[Consumer]) -> Consumer:
        return super().pick(_best_priority(targets, lambda c: c.permits > 0))

    def taker(self, entry: Entry, consumers: Sequence[Consumer]) -> Consumer | None:
        return super().taker(entry, _best_priority(consumers, ready))


def _best_priority(
    consumers: Sequence[Consumer], able: Callable[[Consumer], bool]
) -> list[Consumer]:
    """The able consumers of the best (lowest) priority level; all of them if none is able."""
    able_ones = [c for c in consumers if able(c)]
    if not able_ones:
        return list(consumers)
    best = min(c.priority_level for c in able_ones)
    return [c for c in able_ones if c.priority_level == best]


class KeySharedDispatcher(SharedDispatcher):
    __slots__ = ("routing",)
    type = SubscriptionType.KEY_SHARED

    def __init__(self, topic: TopicName, consistent_hashing: bool = True) -> None:
        super().__init__(topic)
        self.routing: KeySharedRouting[Consumer] = KeySharedRouting(consistent_hashing)

    def admit(self, consumer: Consumer, consumers: Sequence[Consumer]) -> None:
        self.routing.assign(consumer, consumers)

    def joining(
        self,
        consumer: Consumer,
        consumers: Sequence[Consumer],
        cursor: ManagedCursor,
        ledger: ManagedLedger,
    ) -> None:
        self.routing.joined(consumer, consumers, cursor, ledger)

    def removed(self, consumer: Consumer) -> None:
        self.routing.remove_consumer(consumer)

    def taker(self, entry: Entry, consumers: Sequence[Consumer]) -> Consumer | None:
        owner = self.routing.selector.select(entry_key(entry).hash)
        return owner if owner is not None and ready(owner) else None

    async def dispatch(self, rounds: Rounds) -> bool:
        return await rounds.dispatch_by_key(self.routing)

    def owner_of_key(self, key: bytes) -> Consumer | None:
        """The consumer that owns a sticky key's hash slot now."""
        return self.routing.selector.select(key_hash(key))

    def describe(self, consumer: Consumer, stats: dict[str, object]) -> dict[str, object]:
        ranges = self.routing.selector.ranges_of(consumer)
        stats["keyHashRanges"] = [f"[{start}, {end}]" for start, end in ranges]
        return stats

    def forget(self, position: Position) -> None:
        self.routing.forget(position)

    def forget_up_to(self, position: Position) -> None:
        self.routing.forget_up_to(position)

    def clear(self) -> None:
        self.routing.clear()


DISPATCHERS: dict[SubscriptionType, type[Dispatcher]] = {
    SubscriptionType.EXCLUSIVE: ExclusiveDispatcher,
    SubscriptionType.SHARED: SharedDispatcher,
    SubscriptionType.FAILOVER: FailoverDispatcher,
    SubscriptionType.KEY_SHARED: KeySharedDispatcher,
}


def dispatcher_for(
    sub_type: SubscriptionType, topic: TopicName, config: BrokerConfig | None = None
) -> Dispatcher:
    """``config``: a persistent subscription's settings (Key_Shared's
    ``subscriptionKeySharedUseConsistentHashing``, Failover's ``activeConsumerFailover*``);
    None: the defaults, and a Failover subscription hands over at once (non-persistent)."""
    if sub_type == SubscriptionType.KEY_SHARED:
        hashing = config is None or config.subscription_key_shared_use_consistent_hashing
        return KeySharedDispatcher(topic, hashing)
    if sub_type == SubscriptionType.FAILOVER and config is not None:
        delay = config.active_consumer_failover_delay_time_millis / 1000
        return FailoverDispatcher(topic, delay, config.active_consumer_failover_consistent_hashing)
    return DISPATCHERS[sub_type](topic)


def ready(consumer: Consumer) -> bool:
    """Able to take an entry now: permits left and its connection not full."""
    return consumer.permits > 0 and consumer.writable
