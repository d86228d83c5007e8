"""A non-persistent topic: its producers, its live subscriptions and the fan-out of each
message to them.

As in Pulsar, each published entry is offered once to every subscription; a subscription
hands it to one consumer able to take it now (permits left, connection not full) by its
type, or drops it. A topic without subscriptions drops what is published. Every message
has the id ``0:0``, the receipt's too; acknowledgements are accepted and ignored. A
subscription lives as long as it has consumers.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.consumer import (
    PULSAR_TYPE_NAMES,
    Consumer,
    ConsumerBusyError,
    Delivery,
    SubscriptionType,
)
from dedup_broker.domain.dispatchers import dispatcher_for
from dedup_broker.domain.non_persistent.metrics import DropReason, NonPersistentMetrics
from dedup_broker.domain.producer_access import ProducerHost
from dedup_broker.domain.subscription_errors import ReadCompactedNotAllowedError
from dedup_broker.domain.topic_rates import in_rates, out_rates
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.outcomes import PublishOutcome, PublishResult, settled
from dedup_broker.domain_base.producer import Producer
from dedup_broker.errors import PermanentError, ServiceNotReadyError
from dedup_broker.storage.api import Entry, Position

if TYPE_CHECKING:
    from collections.abc import Callable

    from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import batch_size

MESSAGE_ID = Position(0, 0)
"""The id Pulsar gives every message of a non-persistent topic (receipts and deliveries)."""
NO_MESSAGE = Position(-1, -1)
"""What a non-persistent topic answers for its last message and acknowledged position."""
IDLE_SECONDS = 60.0
"""A topic without producers and subscriptions for this long goes away (Pulsar's
``brokerDeleteInactiveTopicsFrequencySeconds`` default)."""
RATE_WINDOW_SECONDS = 60


class NotOnNonPersistentError(PermanentError):
    """The operation needs stored messages (seek, a durable subscription without consumer)."""


class RateMeter:
    """A count of events and their rate per second over the last minute."""

    def __init__(self) -> None:
        self.total = 0
        self._seconds: deque[tuple[int, int]] = deque()

    def record(self, count: int, now: float | None = None) -> None:
        self.total += count
        second = int(time.monotonic() if now is None else now)
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1] = (second, self._seconds[-1][1] + count)
        else:
            self._seconds.append((second, count))
        self._trim(second)

    def rate(self, now: float | None = None) -> float:
        self._trim(int(time.monotonic() if now is None else now))
        return sum(count for _, count in self._seconds) / RATE_WINDOW_SECONDS

    def _trim(self, second: int) -> None:
        while self._seconds and self._seconds[0][0] <= second - RATE_WINDOW_SECONDS:
            self._seconds.popleft()


@dataclass(frozen=True, slots=True)
class Fanout:
    """What became of one published entry: the subscriptions that handed it to a consumer
    and those that dropped it (neither: the topic had no subscription)."""

    delivered: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


class NonPersistentSubscription:
    """Consumers of one subscription and the choice of who takes each entry."""

    def __init__(
        self,
        name: str,
        sub_type: SubscriptionType,
        topic: TopicName,
        metrics: NonPersistentMetrics,
        on_empty: Callable[[NonPersistentSubscription], None],
    ) -> None:
        self.name = name
        self.topic = topic
        self.partition_index = topic.partition_index
        self.consumers: list[Consumer] = []
        self.msgs_out = 0
        self.bytes_out = 0
        self.drops = RateMeter()
        self._metrics = metrics
        self._on_empty = on_empty
        self._dispatcher = dispatcher_for(sub_type, topic)

    @property
    def type(self) -> SubscriptionType:
        return self._dispatcher.type

    # --- consumers ------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        if sub_type != self.type and self.consumers:
            raise ConsumerBusyError(
                f"subscription {self.name!r} is of type {self.type.name}, not {sub_type.name}"
            )
        if sub_type != self.type:
            self._dispatcher = dispatcher_for(sub_type, self.topic)
        self._dispatcher.admit(consumer, self.consumers)
        self.consumers.append(consumer)
        consumer.subscription = self
        self._dispatcher.elect(self.consumers)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            consumer.closed = True
            self._dispatcher.removed(consumer)
            self._dispatcher.elect(self.consumers)

    def consumer_left(self, consumer: Consumer) -> None:
        self.remove_consumer(consumer)
        if not self.consumers:
            self._on_empty(self)

    def disconnect(self, consumer: Consumer, destination: Destination | None = None) -> None:
        """The broker closes the consumer (topic unloaded or deleted)."""
        self.consumer_left(consumer)
        consumer.link.close_consumer(consumer)

    @property
    def active_consumer(self) -> Consumer | None:
        return self._dispatcher.active

    # --- what the client asks: flow counts, the rest has nothing to act on -------------
    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits

    def on_ack(self, consumer: Consumer, positions: Iterable[Position], cumulative: bool) -> None:
        """Nothing is kept, so nothing is acknowledged."""

    def on_batch_ack(self, consumer: Consumer, position: Position, unacked: list[int]) -> None:
        """Nothing is kept, so nothing is acknowledged."""

    def on_redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nothing is kept to deliver again (Pulsar ignores it too)."""

    async def reset_cursor(self, position: Position) -> None:
        raise NotOnNonPersistentError("seek is not supported on non-persistent topics")

    def trigger(self) -> None:
        """Nothing waits to be dispatched: entries go when they are published."""

    @property
    def mark_delete_position(self) -> Position:
        return NO_MESSAGE

    def position_before(self, position: Position) -> Position:
        return position

    def backlog(self) -> int:
        return 0

    # --- dispatch -------------------------------------------------------------------
    def offer(self, entry: Entry, messages: int) -> bool:
        """Hand the entry to a consumer that can take it now; False: dropped."""
        consumer = self._dispatcher.taker(entry, self.consumers)
        if consumer is None:
            self.drops.record(messages)
            self._metrics.dropped(DropReason.NO_PERMITS, messages)
            return False
        consumer.permits -= messages
        self.msgs_out += messages
        self.bytes_out += len(entry.data)
        self._metrics.msgs_out.inc(messages)
        consumer.send([Delivery(entry, messages, 0)], tracked=False)
        return True

    def stats(self) -> dict[str, object]:
        return {
            "type": PULSAR_TYPE_NAMES[self.type],
            "msgBacklog": 0,
            **out_rates(self.consumers),
            "msgOutCounter": self.msgs_out,
            "bytesOutCounter": self.bytes_out,
            "msgDropRate": self.drops.rate(),
            "msgDropCounter": self.drops.total,
            "isDurable": False,
            "activeConsumerName": self.active_consumer.name if self.active_consumer else None,
            "consumers": [c.stats() for c in self.consumers],
        }


class NonPersistentTopic(ProducerHost):
    __slots__ = ("_idle_since", "bytes_in", "metrics", "msgs_in", "subscriptions", "unrouted")

    def __init__(self, name: TopicName, config: BrokerConfig, metrics: NonPersistentMetrics):
        super().__init__(name, config, None)
        self.metrics = metrics
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.msgs_in = 0
        self.bytes_in = 0
        self.unrouted = RateMeter()
        """Messages published while the topic had no subscription."""
        self._idle_since = time.monotonic()

    # --- producers ------------------------------------------------------------------
    async def wait_writable(self) -> None:
        """Nothing to wait for: no storage behind the topic."""

    def last_sequence_id(self, producer_name: str) -> int:
        """No deduplication: a producer starts from its own sequence ids."""
        return -1

    def publish(
        self,
        producer: Producer,
        send: pb.CommandSend,
        entry: bytes,
        metadata: pb.MessageMetadata,
    ) -> PublishResult:
        """Fan the entry out now; the receipt follows at once with the id ``0:0``."""
        if self.closed:
            return settled(
                PublishOutcome.failed(ServiceNotReadyError(f"topic {self.name} was unloaded"))
            )
        messages = max(batch_size(metadata), 1)
        self.msgs_in += messages
        self.bytes_in += len(entry)
        producer.msgs_in += messages
        producer.bytes_in += len(entry)
        self.metrics.msgs_in.inc(messages)
        timestamp = metadata.publish_time or int(time.time() * 1000)
        self.fan_out(Entry(MESSAGE_ID, entry, timestamp), messages)
        return settled(PublishOutcome.stored(MESSAGE_ID))

    def fan_out(self, entry: Entry, messages: int) -> Fanout:
        if not self.subscriptions:
            self.unrouted.record(messages)
            self.metrics.dropped(DropReason.NO_SUBSCRIPTION, messages)
            return Fanout()
        delivered: list[str] = []
        dropped: list[str] = []
        for name, subscription in list(self.subscriptions.items()):
            (delivered if subscription.offer(entry, messages) else dropped).append(name)
        return Fanout(tuple(delivered), tuple(dropped))

    # --- subscriptions ----------------------------------------------------------------
    async def subscribe(
        self,
        consumer: Consumer,
        sub_type: SubscriptionType,
        durable: bool,
        initial_position: str,
        start: Position | None,
        start_inclusive: bool,
        read_compacted: bool = False,
    ) -> NonPersistentSubscription:
        """Every subscription is live only (durability, initial and start positions have
        nothing to apply to: the consumer gets what is published from now on)."""
        self.check_open()
        if read_compacted:
            raise ReadCompactedNotAllowedError("non-persistent topics are never compacted")
        name = consumer.subscription_name
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = NonPersistentSubscription(
                name, sub_type, self.name, self.metrics, self._emptied
            )
        subscription.add_consumer(consumer, sub_type)
        self.subscriptions[name] = subscription
        return subscription

    def _emptied(self, subscription: NonPersistentSubscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
            self._idle_since = time.monotonic()

    def consumer_closed(self, consumer: Consumer) -> None:
        consumer.subscription.consumer_left(consumer)

    async def unsubscribe(self, name: str) -> None:
        """The subscription goes with its last consumer; the session removed it first."""
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            for consumer in list(subscription.consumers):
                subscription.disconnect(consumer)

    async def last_message_id(self) -> tuple[Position, int]:
        """Nothing is stored: no last message."""
        return NO_MESSAGE, -1

    # --- lifecycle and stats --------------------------------------------------------
    def _producer_disconnected(self, producer: Producer) -> None:
        self._idle_since = time.monotonic()

    def idle_for(self, now: float | None = None) -> float:
        """Seconds without producers and subscriptions (0 while it has any)."""
        if self.producers or self.subscriptions or self.access.waiting:
            return 0.0
        return (time.monotonic() if now is None else now) - self._idle_since

    @property
    def busy(self) -> bool:
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    async def close(self, destination: Destination | None = None) -> None:
        """Unload or delete: producers and consumers are told to go (clients reconnect,
        at ``destination`` when given)."""
        self.closed = True
        self.access.fail_waiting(ServiceNotReadyError(f"topic {self.name} was unloaded"))
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
            producer.link.close_producer(producer, destination)
        for subscription in list(self.subscriptions.values()):
            for consumer in list(subscription.consumers):
                subscription.disconnect(consumer, destination)
        self.subscriptions.clear()

    def stats(self) -> dict[str, object]:
        """Pulsar's ``NonPersistentTopicStats`` shape (rates over the last stats period)."""
        subscriptions = {n: s.stats() for n, s in self.subscriptions.items()}
        sent = out_rates(c for s in self.subscriptions.values() for c in s.consumers)
        return {
            **in_rates(self.producers.values()),
            "msgRateOut": sent["msgRateOut"],
            "msgThroughputOut": sent["msgThroughputOut"],
            "msgInCounter": self.msgs_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": sum(s.msgs_out for s in self.subscriptions.values()),
            "bytesOutCounter": sum(s.bytes_out for s in self.subscriptions.values()),
            "msgDropRate": self.unrouted.rate(),
            "msgDropCounter": self.unrouted.total,
            "storageSize": 0,
            "publishers": [p.stats() for p in self.producers.values()],
            "waitingPublishers": len(self.access.waiting),
            "topicEpoch": self.access.epoch,
            "subscriptions": subscriptions,
            "replication": {},
        }
