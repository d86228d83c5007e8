"""A consumer attached to a subscription, the link that carries its messages, and the
subscription types."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol

from dedup_broker.domain_base.dates import pulsar_date
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.producer import NO_METADATA
from dedup_broker.domain_base.rates import SampledRates, rate
from dedup_broker.domain_base.topic_policies import ConsumerLimits
from dedup_broker.errors import PermanentError
from dedup_broker.storage.api import Entry, Position

if TYPE_CHECKING:
    from dedup_broker.domain.key_hash import KeySharedSettings


class SubscriptionType(Enum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


PULSAR_TYPE_NAMES = {
    SubscriptionType.EXCLUSIVE: "Exclusive",
    SubscriptionType.SHARED: "Shared",
    SubscriptionType.FAILOVER: "Failover",
    SubscriptionType.KEY_SHARED: "Key_Shared",
}


class ConsumerBusyError(PermanentError):
    """Another consumer holds an Exclusive subscription, or the type differs."""


def check_consumer_limits(
    limits: ConsumerLimits,
    topic: object,
    subscriptions: Mapping[str, ConsumerSubscription],
    subscription: str,
) -> None:
    """``maxConsumersPerTopic`` and ``maxConsumersPerSubscription`` before one more joins
    ``subscription`` (``subscriptions``: the topic's)."""
    consumers = {name: len(each.consumers) for name, each in subscriptions.items()}
    per_topic = limits.per_topic
    if per_topic and sum(consumers.values()) >= per_topic:
        raise ConsumerBusyError(
            f"Topic {topic} reached max consumers limit (maxConsumersPerTopic={per_topic})"
        )
    per_subscription = limits.per_subscription
    if per_subscription and consumers.get(subscription, 0) >= per_subscription:
        raise ConsumerBusyError(
            f"Subscription {subscription} reached max consumers limit "
            f"(maxConsumersPerSubscription={per_subscription})"
        )


class Delivery(NamedTuple):
    """One entry on its way to a consumer."""

    entry: Entry
    messages: int
    redelivery_count: int
    ack_set: tuple[int, ...] = ()
    """Batch-index acknowledgement: the batch's messages still unacknowledged (a bit set
    in 64-bit words, as the client sent it); empty when none was acknowledged."""


class ConsumerLink(Protocol):
    """What the domain may ask of the client side of a consumer (the session)."""

    @property
    def remote_address(self) -> str: ...

    @property
    def writable(self) -> bool:
        """False while the client's socket buffer is full: dispatch waits."""

    def deliver(self, consumer: Consumer, deliveries: Sequence[Delivery]) -> None:
        """Send entries to the client (permits were charged already)."""

    def close_consumer(self, consumer: Consumer, destination: Destination | None = None) -> None:
        """The broker closes the consumer (seek, unload): the client resubscribes, at
        ``destination`` once it is known (when given)."""

    def active_consumer_changed(self, consumer: Consumer, active: bool) -> None:
        """Failover: ``consumer`` became the active one of its subscription, or stopped."""

    def reached_end_of_topic(self, consumer: Consumer) -> None:
        """The topic was terminated and ``consumer`` has read all of it."""


class ConsumerSubscription(Protocol):
    """What a consumer's session asks of its subscription, on a persistent topic
    (``subscription.Subscription``) or a non-persistent one."""

    name: str
    consumers: list[Consumer]

    @property
    def type(self) -> SubscriptionType: ...

    @property
    def active_consumer(self) -> Consumer | None: ...

    @property
    def mark_delete_position(self) -> Position: ...

    def position_before(self, position: Position) -> Position: ...

    def on_flow(self, consumer: Consumer, permits: int) -> None: ...

    def on_ack(
        self, consumer: Consumer, positions: Iterable[Position], cumulative: bool
    ) -> None: ...

    def on_batch_ack(self, consumer: Consumer, position: Position, unacked: list[int]) -> None: ...

    def on_redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None: ...

    async def reset_cursor(self, position: Position) -> None: ...

    def trigger(self) -> None: ...

    def backlog(self) -> int: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def consumer_left(self, consumer: Consumer) -> None: ...


_NO_PENDING: dict[Position, int] = {}
"""Never written: a consumer makes its own table when it sends its first entry."""


@dataclass(eq=False, slots=True)
class Consumer:
    """Permits, messages in flight and counters of one consumer."""

    link: ConsumerLink
    consumer_id: int
    name: str
    subscription_name: str
    priority_level: int = 0
    permits: int = 0
    pending: dict[Position, int] = field(default_factory=lambda: _NO_PENDING)
    """Entries sent and not yet acknowledged -> number of messages in the entry (one
    shared empty table while there are none: an idle consumer holds no table)."""
    unacked_messages: int = 0
    max_unacked_messages: int | None = None
    """Unacknowledged messages at which Shared and Key_Shared subscriptions stop sending to
    it (0: no limit), as its topic's policies said when it subscribed; ``None``: the
    broker's ``maxUnackedMessagesPerConsumer``."""
    epoch: int = 0
    partition_index: int = -1
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    msgs_out: int = 0
    bytes_out: int = 0
    msgs_redelivered: int = 0
    """Messages in flight it asked to have sent again (nack, ack timeout, redelivery)."""
    msgs_acked: int = 0
    """Messages of the entries it held that its acknowledgements released."""
    rates: SampledRates | None = None
    """``msgs_out``, ``bytes_out``, ``msgs_redelivered``, ``msgs_acked`` per second over
    the last stats period (``topic_rates``)."""
    last_sent: float = 0.0
    """``time.monotonic()`` of its last entries sent to be acknowledged."""
    last_flow_ms: int = 0
    """When its client last gave permits (FLOW), ms since the epoch."""
    closed: bool = False
    told_end_of_topic: bool = False
    """It heard REACHED_END_OF_TOPIC (a terminated topic tells each consumer once)."""
    key_shared: KeySharedSettings | None = None
    """Key_Shared subscriptions: the consumer's mode, ranges and ordering choice."""
    metadata: Mapping[str, str] = field(default_factory=lambda: NO_METADATA)
    """The consumer's properties (``CommandSubscribe.metadata``)."""
    client_version: str = ""
    subscription: ConsumerSubscription = field(init=False)

    @property
    def writable(self) -> bool:
        return not self.closed and self.link.writable

    def send(self, deliveries: list[Delivery], tracked: bool = True) -> None:
        """Hand the entries to the link in one write; ``tracked``: they stay in flight
        until acknowledged (messages of a non-persistent topic are not tracked)."""
        if tracked and self.pending is _NO_PENDING:
            self.pending = {}
        for delivery in deliveries:
            if tracked:
                self.pending[delivery.entry.position] = delivery.messages
                self.unacked_messages += delivery.messages
            self.msgs_out += delivery.messages
            self.bytes_out += len(delivery.entry.data)
        if tracked:
            self.last_sent = time.monotonic()
        self.link.deliver(self, deliveries)

    def forget(self, position: Position) -> bool:
        """Drop a position from the in-flight set; True if it was there."""
        count = self.pending.pop(position, None)
        if count is None:
            return False
        if not self.pending:
            self.pending = _NO_PENDING
        self.unacked_messages -= count
        return True

    def acknowledge(self, position: Position) -> bool:
        """``forget`` for an acknowledgement: the entry's messages count as acknowledged
        (Pulsar's ``messageAckRate`` counts messages, a batch's each); True if it held it."""
        self.msgs_acked += self.pending.get(position, 0)
        return self.forget(position)

    def acknowledge_up_to(self, position: Position) -> None:
        """A cumulative acknowledgement: every entry it holds up to ``position``."""
        for pos in [p for p in self.pending if p <= position]:
            self.acknowledge(pos)

    def take_pending(self) -> list[Position]:
        """Every in-flight position, clearing the set (for redelivery)."""
        positions = list(self.pending)
        self.pending = _NO_PENDING
        self.unacked_messages = 0
        return positions

    def give_back(self, positions: list[Position] | None) -> list[Position]:
        """What its client asks to have sent again: everything in flight (``positions``
        None) or those of ``positions`` it holds; counted for ``msgRateRedeliver``."""
        unacked = self.unacked_messages
        if positions is None:
            returned = self.take_pending()
        else:
            returned = [p for p in positions if self.forget(p)]
        self.msgs_redelivered += unacked - self.unacked_messages
        return returned

    def stats(self) -> dict[str, object]:
        return {
            "consumerName": self.name,
            "address": self.link.remote_address,
            "connectedSince": pulsar_date(self.created_ms),
            "clientVersion": self.client_version,
            "availablePermits": self.permits,
            "unackedMessages": self.unacked_messages,
            "blockedConsumerOnUnackedMsgs": False,
            "msgRateOut": rate(self.rates, 0),
            "msgThroughputOut": rate(self.rates, 1),
            "msgRateRedeliver": rate(self.rates, 2),
            "msgOutCounter": self.msgs_out,
            "bytesOutCounter": self.bytes_out,
            "lastConsumedFlowTimestamp": self.last_flow_ms,
            "priorityLevel": self.priority_level,
            "metadata": dict(self.metadata),
        }


ACKS_IN_FLIGHT_S = 0.3
"""How long a client may take to acknowledge what it just received: Pulsar clients group
acknowledgements for 100 ms (``acknowledgmentGroupTime``) before sending them."""


async def let_acks_arrive(consumers: Iterable[Consumer]) -> None:
    """Before consumers are disconnected (an unload): wait until what was sent to them
    lately is acknowledged, or could have been. An acknowledgement that reaches a
    disconnected consumer is lost, and its client, having delivered the messages once,
    drops them when they come again, so they would stay unacknowledged until another
    consumer of the subscription gets them."""
    waiting = [c for c in consumers if c.pending]
    while waiting:
        latest = max(c.last_sent for c in waiting)
        remaining = latest + ACKS_IN_FLIGHT_S - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(remaining, 0.01))
        waiting = [c for c in waiting if c.pending]


@functools.cache  # one check per limit, shared by every subscription
def can_take(unacked_limit: int) -> Callable[[Consumer], bool]:
    """Whether a consumer may receive now: permits left, its connection not full, and
    fewer unacknowledged messages than its limit (0: none), else ``unacked_limit``."""

    def check(consumer: Consumer) -> bool:
        return room(consumer, unacked_limit) > 0 and consumer.writable

    return check


def room(consumer: Consumer, unacked_limit: int) -> int:
    """Messages a consumer may be sent now: its permits, and no more than its limit of
    unacknowledged messages leaves (its own, else ``unacked_limit``; 0: no limit)."""
    limit = consumer.max_unacked_messages
    if limit is None:
        limit = unacked_limit
    if limit <= 0:
        return consumer.permits
    return min(consumer.permits, limit - consumer.unacked_messages)
