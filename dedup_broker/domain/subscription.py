"""A subscription: a cursor plus the dispatcher that feeds its consumers.

The dispatcher of the subscription's type (``dispatchers.py``) says who may join, who is
active, who receives; the subscription reads what to send (the replay set first, then a
compacted view, then the cursor), keeps acknowledgements and redeliveries, and charges
each consumer's permits. Key_Shared rounds are chosen by ``key_shared.py``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.compacted_reads import CompactedReads, CompactedViewSource
from dedup_broker.domain.consumer import (
    PULSAR_TYPE_NAMES,
    Consumer,
    ConsumerBusyError,
    Delivery,
    SubscriptionType,
    can_take,
    room,
)
from dedup_broker.domain.delayed_delivery import DelayedDelivery
from dedup_broker.domain.dispatchers import KeySharedDispatcher, dispatcher_for
from dedup_broker.domain.key_shared import KeySharedRouting
from dedup_broker.domain.redeliveries import Redeliveries
from dedup_broker.domain.termination import tell_end_of_topic
from dedup_broker.domain_base.handover import Destination
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import BrokerError
from dedup_broker.lazy import LazyLock
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import Entry, ManagedCursor, ManagedLedger, Position
from dedup_broker.transactions.buffer import TransactionBuffer

log = logging.getLogger(__name__)

SEEK_GRACE_SECONDS = 30.0
"""How long a reader's subscription outlives its consumers after a seek (they reconnect)."""


class HeldAcknowledgements(Protocol):
    def holds(self, subscription: str, position: Position) -> bool:
        """Acknowledged in a transaction still open: not delivered again meanwhile."""
        ...


class SubscriptionOwner(Protocol):
    """The topic a subscription belongs to."""

    def subscription_expired(self, subscription: Subscription) -> None: ...

    @property
    def name(self) -> TopicName: ...

    entries_read: int
    """Entries its subscriptions read from storage (``pulsar_storage_read_rate``)."""

    @property
    def transactions(self) -> TransactionBuffer:
        """What the topic's transactions hide: markers, aborted transactions' messages."""
        ...

    @property
    def pending_acks(self) -> HeldAcknowledgements | None: ...

    def delays_delivery(self) -> bool:
        """Its ``delayedDelivery`` policy (asked once per dispatch round)."""
        ...


class Subscription:
    __slots__ = (
        "_again",
        "_can_take",
        "_compacted",
        "_delayed",
        "_dispatcher",
        "_last_seek",
        "_listening",
        "_lock",
        "_owner",
        "_redeliveries",
        "_task",
        "bytes_out",
        "closed",
        "config",
        "consumers",
        "cursor",
        "durable",
        "ledger",
        "msgs_out",
        "name",
        "partition_index",
    )

    def __init__(
        self,
        name: str,
        cursor: ManagedCursor,
        sub_type: SubscriptionType,
        durable: bool,
        *,
        ledger: ManagedLedger,
        partition_index: int,
        config: BrokerConfig,
        owner: SubscriptionOwner,
    ) -> None:
        self.ledger = ledger
        self.partition_index = partition_index
        self.config = config
        self._owner = owner
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.consumers: list[Consumer] = []
        self._dispatcher = dispatcher_for(sub_type, owner.name, config)
        self._can_take = can_take(config.max_unacked_messages_per_consumer)
        self._redeliveries = Redeliveries()
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._lock = LazyLock()
        self._listening = False
        self._last_seek = 0.0
        self._delayed: DelayedDelivery | None = None
        """Made on the first entry a Shared or Key_Shared subscription may hold back."""
        self._compacted: CompactedReads | None = None
        self.msgs_out = 0
        self.bytes_out = 0
        self.closed = False

    @property
    def type(self) -> SubscriptionType:
        return self._dispatcher.type

    # --- consumers ----------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        if sub_type != self.type:
            if self.consumers:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is of type {self.type.name}, not {sub_type.name}"
                )
            self._dispatcher = dispatcher_for(sub_type, self._owner.name, self.config)
        dispatcher = self._dispatcher
        dispatcher.admit(consumer, self.consumers)
        dispatcher.joining(consumer, self.consumers, self.cursor, self.ledger)
        self.consumers.append(consumer)
        if not self._listening:
            self._listening = True
            self.ledger.add_entries_listener(self.trigger)
        self._dispatcher.elect(self.consumers, self._hand_over)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        consumer.closed = True
        self._dispatcher.removed(consumer)
        returned = consumer.take_pending()
        if returned:
            self._redeliveries.count(returned)
            if self._dispatcher.redelivers_singly:
                self._redeliveries.replay.update(returned)
            else:
                asyncio.get_running_loop().create_task(self._rewind())
        if not self.consumers and self._listening:
            self._listening = False
            self.ledger.remove_entries_listener(self.trigger)
        self._dispatcher.elect(self.consumers, self._hand_over)
        self.trigger()

    @property
    def active_consumer(self) -> Consumer | None:
        return self._dispatcher.active

    def _hand_over(self, rewind: bool) -> None:
        """Failover hands over (``FailoverDispatcher``): what was in flight goes out again."""
        if rewind and not self.closed:
            asyncio.get_running_loop().create_task(self._rewind())
        else:
            self.trigger()

    def consumer_for_key(self, key: bytes) -> Consumer | None:
        """Key_Shared: the consumer that owns a sticky key's hash slot now."""
        dispatcher = self._dispatcher
        return dispatcher.owner_of_key(key) if isinstance(dispatcher, KeySharedDispatcher) else None

    def should_expire(self) -> bool:
        """A non-durable subscription dies with its last consumer (after a seek grace)."""
        if self.durable or self.consumers:
            return False
        return time.monotonic() - self._last_seek > SEEK_GRACE_SECONDS

    def consumer_left(self, consumer: Consumer) -> None:
        """The consumer is gone (closed by its client or its connection lost)."""
        self.remove_consumer(consumer)
        if self.should_expire():
            self._owner.subscription_expired(self)

    def disconnect(self, consumer: Consumer, destination: Destination | None = None) -> None:
        """The broker closes the consumer; its client resubscribes (at ``destination``)."""
        self.consumer_left(consumer)
        consumer.link.close_consumer(consumer, destination)

    # --- flow, acks, redelivery ---------------------------------------------------
    @property
    def mark_delete_position(self) -> Position:
        return self.cursor.mark_delete_position

    def position_before(self, position: Position) -> Position:
        """The entry before ``position`` (a cumulative ack of a batch acknowledged in part
        moves up to it)."""
        return self.ledger.previous_position(position)

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.trigger()

    def on_ack(
        self, consumer: Consumer | None, positions: Iterable[Position], cumulative: bool
    ) -> None:
        """Acknowledgements of ``consumer`` (None: of whichever consumer has the messages,
        as for a transaction's acknowledgements applied at its commit)."""
        if cumulative:
            for position in positions:
                for each in [consumer] if consumer is not None else self.consumers:
                    each.acknowledge_up_to(position)
                self.cursor.mark_delete(position)
                self._redeliveries.acknowledged_up_to(position)
                self._dispatcher.forget_up_to(position)
        else:
            acked = list(positions)
            for position in acked:
                if consumer is None or not consumer.acknowledge(position):
                    for other in self.consumers:
                        if other.acknowledge(position):
                            break
                self._redeliveries.acknowledged(position)
                self._dispatcher.forget(position)
            self.cursor.delete(acked)
        self.trigger()

    def on_batch_ack(
        self, consumer: Consumer | None, position: Position, unacked: Sequence[int]
    ) -> None:
        """Part of a batch acknowledged (batch-index acknowledgement): kept by the cursor
        (and stored with it), and the whole entry acknowledged once none of its messages
        is left."""
        if self.cursor.delete_batch_indexes(position, unacked):
            self.on_ack(consumer, [position], cumulative=False)

    def on_redeliver(self, consumer: Consumer | None, positions: list[Position] | None) -> None:
        """Nack / ack timeout / explicit redelivery request from the client; or, without a
        consumer, messages none holds (a transaction that acknowledged them aborted)."""
        returned = list(positions or ()) if consumer is None else consumer.give_back(positions)
        self._redeliveries.count(returned)
        if self._dispatcher.redelivers_singly:
            self._redeliveries.replay.update(returned)
            self.trigger()
        else:
            if consumer is not None and positions is not None:
                # Order matters here: everything in flight is sent again from the cursor.
                self._redeliveries.count(consumer.take_pending())
            asyncio.get_running_loop().create_task(self._rewind())

    async def _rewind(self) -> None:
        async with self._lock:
            self._rewind_now()
        self.trigger()

    def _rewind_now(self) -> None:
        """Everything unacknowledged goes out again from the cursor (the caller holds the
        lock)."""
        for consumer in self.consumers:
            self._redeliveries.count(consumer.take_pending())
        self.cursor.rewind()
        if self._compacted is not None:
            self._compacted.restart_at(self._compacted.first_unacknowledged())

    async def reset_cursor(self, position: Position) -> None:
        """SEEK: disconnect consumers, then move the subscription (as Pulsar does).

        Consumers go first so that acks the client flushes after the seek (for messages
        before it) find no consumer and cannot move the reset cursor.
        """
        self._last_seek = time.monotonic()  # a reader's subscription waits for it to return
        for consumer in list(self.consumers):
            self.disconnect(consumer)
        async with self._lock:
            await self.cursor.reset(position)
            self._redeliveries.clear()
            self._dispatcher.clear()
            if self._delayed is not None:
                self._delayed.clear()
            if self._compacted is not None:
                self._compacted.restart_at(position)
            self._last_seek = time.monotonic()

    def read_compacted(self, view: CompactedViewSource, start: Position | None) -> None:
        """Serve the compacted view up to its horizon from ``start`` (None: from the first
        unacknowledged position), then the topic after the horizon (``read_compacted``)."""
        self._compacted = CompactedReads(view, start, self.cursor, self.ledger)

    # --- dispatching ----------------------------------------------------------------
    def trigger(self) -> None:
        """Dispatch as soon as possible; coalesces many triggers into one loop."""
        if self.closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._dispatch_loop())
        else:
            self._again = True

    async def _dispatch_loop(self) -> None:
        try:
            while not self.closed:
                self._again = False
                if not await self._dispatcher.dispatch(self) and not self._again:
                    if not self._redeliveries.waiting():
                        tell_end_of_topic(self.ledger, self.cursor, self.consumers)
                    return
        except BrokerError as exc:
            log.warning("dispatch on %s/%s paused: %s", self.ledger.name, self.name, exc)
            asyncio.get_running_loop().call_later(1.0, self.trigger)
        except Exception:
            log.exception("dispatch on %s/%s failed", self.ledger.name, self.name)
            asyncio.get_running_loop().call_later(1.0, self.trigger)
        finally:
            if self._task is asyncio.current_task():
                self._task = None  # a finished task holds its frame: 600 B per subscription

    async def dispatch_in_order(self) -> bool:
        """One round: the replay set first, then the compacted view, then the cursor."""
        async with self._lock:
            targets = self._dispatcher.targets(self.consumers, self._can_take)
            if not targets:
                return False
            limited = self.type is SubscriptionType.SHARED  # reads stay within the limits
            unacked_limit = self.config.max_unacked_messages_per_consumer
            budget = min(
                sum(room(c, unacked_limit) if limited else c.permits for c in targets),
                self.config.dispatcher_max_read_batch_size,
            )
            if self._redeliveries.waiting():
                entries = await self._redeliveries.read(budget, self.cursor, self.ledger, self.name)
            elif (
                self._compacted is not None
                and (compacted := await self._compacted.read(budget)) is not None
            ):
                entries = compacted
            elif self.cursor.has_more_entries():
                entries = await self.cursor.read_entries(budget)
            else:
                return False
            self._owner.entries_read += len(entries)
            if not entries:
                return self._redeliveries.waiting()
            delays = self._owner.delays_delivery()
            ready = [e for e in entries if not self._hold(e, delays)]
            if ready:
                # The consumers may have changed while the read was in flight.
                now = self._dispatcher.targets(self.consumers, self._can_take) or targets
                live = [c for c in now if not c.closed] or now
                self._deliver((self._dispatcher.pick(live), e, messages_in_entry(e)) for e in ready)
            return True

    async def dispatch_by_key(self, routing: KeySharedRouting[Consumer]) -> bool:
        """One Key_Shared round: each entry to the owner of its key's slot."""
        async with self._lock:
            chosen = await routing.dispatch(
                self.consumers,
                self._can_take,
                self._redeliveries.replay,
                self.cursor,
                self.ledger,
                self.config.dispatcher_max_read_batch_size,
                functools.partial(self._hold, delays=self._owner.delays_delivery()),
            )
            self._owner.entries_read += chosen.entries_read
            self._deliver(chosen.deliveries)
            return chosen.progressed

    def _hold(self, entry: Entry, delays: bool) -> bool:
        """Not delivered now: never, for what the topic hides (acknowledged here, so it
        leaves the backlog); not while a transaction holds its acknowledgement (again if
        that aborts); or until its delivery time (Shared and Key_Shared, when the topic's
        ``delayedDelivery`` policy, ``delays``, is active)."""
        if self._owner.transactions.hidden(entry.data):
            self.cursor.delete((entry.position,))
            return True
        held = self._owner.pending_acks
        if held is not None and held.holds(self.name, entry.position):
            return True
        if not (delays and self._dispatcher.delays):
            return False
        if self._delayed is None:
            self._delayed = DelayedDelivery(self._delayed_due)
        return self._delayed.hold(entry)

    def _delayed_due(self, positions: list[Position]) -> None:
        self._redeliveries.replay.update(positions)
        self.trigger()

    def _deliver(self, chosen: Iterable[tuple[Consumer, Entry, int]]) -> None:
        """Charge each consumer's permits for its entries and hand them over in one write
        per consumer.

        Entries read for a consumer that left while the read was in flight go out again: as
        single positions (Shared, Key_Shared) or from the rewound cursor (the types that
        keep the log's order). Else the cursor would stand past them, and the next consumer
        would not receive them before some later redelivery."""
        per_consumer: dict[Consumer, list[Delivery]] = {}
        left: list[Position] = []
        for consumer, entry, count in chosen:
            if consumer.closed:  # it left while its entries were being read
                left.append(entry.position)
                continue
            redeliveries = self._redeliveries.counts.get(entry.position, 0)
            ack_set = self.cursor.batch_ack_set(entry.position)
            per_consumer.setdefault(consumer, []).append(
                Delivery(entry, count, redeliveries, ack_set)
            )
            consumer.permits -= count
            self.msgs_out += count
            self.bytes_out += len(entry.data)
        for consumer, batch in per_consumer.items():
            consumer.send(batch)
        if left and self._dispatcher.redelivers_singly:
            self._redeliveries.replay.update(left)
        elif left:
            self._rewind_now()

    # --- lifecycle and stats --------------------------------------------------------
    async def close(self) -> None:
        self.closed = True
        if self._delayed is not None:
            self._delayed.clear()
        if self._listening:
            self._listening = False
            self.ledger.remove_entries_listener(self.trigger)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def backlog(self) -> int:
        return self.cursor.backlog()

    def stats(self) -> dict[str, object]:
        active = self._dispatcher.active
        return {
            "type": PULSAR_TYPE_NAMES[self.type],
            "msgBacklog": self.backlog(),
            "msgOutCounter": self.msgs_out,
            "bytesOutCounter": self.bytes_out,
            "isDurable": self.durable,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "msgDelayed": delayed_messages(self),
            "msgBacklogNoDelayed": max(0, self.backlog() - delayed_messages(self)),
            "blockedSubscriptionOnUnackedMsgs": False,
            "isReplicated": False,
            "subscriptionProperties": {},
            "activeConsumerName": active.name if active else None,
            "consumers": [self._dispatcher.describe(c, c.stats()) for c in self.consumers],
        }


def trigger_all(subscriptions: Mapping[str, Subscription]) -> None:
    """Dispatch on every subscription (what they may read grew)."""
    for subscription in subscriptions.values():
        subscription.trigger()


def messages_in_entry(entry: Entry) -> int:
    """How many messages an entry holds (a batch counts each of its messages)."""
    try:
        metadata = parse_metadata_only(entry.data)
    except BrokerError:
        return 1
    if metadata.HasField("num_messages_in_batch"):
        return max(1, metadata.num_messages_in_batch)
    return 1


def delayed_messages(subscription: Subscription) -> int:
    """Messages held until their delivery time (``msgDelayed``)."""
    return len(subscription._delayed) if subscription._delayed is not None else 0
