"""A subscription: a cursor plus the dispatcher that feeds its consumers.

Exclusive and Failover subscriptions have one active consumer and keep the order of the
log: a redelivery rewinds the cursor. Shared subscriptions spread entries round-robin
over consumers with permits and redeliver single positions out of order. Key_Shared
subscriptions redeliver single positions too, and leave the choice of consumer to
``key_shared.py`` (one consumer per key, in the order of the log).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from enum import Enum
from typing import TYPE_CHECKING

from dedup_broker.config import BrokerConfig
from dedup_broker.domain.consumer import Consumer, Delivery
from dedup_broker.domain.delayed_delivery import DelayedDelivery
from dedup_broker.domain.key_hash import key_hash
from dedup_broker.domain.key_shared import KeySharedDispatcher
from dedup_broker.errors import BrokerError, PermanentError
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import Entry, Position

if TYPE_CHECKING:
    from dedup_broker.compaction.view import CompactedView
    from dedup_broker.storage.api import ManagedCursor, ManagedLedger

log = logging.getLogger(__name__)

SEEK_GRACE_SECONDS = 30.0
"""How long a reader's subscription outlives its consumers after a seek (they reconnect)."""


CompactedViewSource = Callable[[], Awaitable["CompactedView | None"]]
"""The topic's compacted view (None before its first compaction)."""


class SubscriptionType(Enum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class ConsumerBusyError(PermanentError):
    """Another consumer holds an Exclusive subscription, or the type differs."""


class Subscription:
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
        on_expired: Callable[[Subscription], None],
    ) -> None:
        self.ledger = ledger
        self.partition_index = partition_index
        self.config = config
        self._on_expired = on_expired
        self.name = name
        self.cursor = cursor
        self.type = sub_type
        self.durable = durable
        self.consumers: list[Consumer] = []
        self.redelivery_counts: dict[Position, int] = {}
        self._replay: set[Position] = set()
        self._active: Consumer | None = None
        self._rr_index = 0
        self._key_shared_state: KeySharedDispatcher[Consumer] | None = None
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._lock = asyncio.Lock()
        self._unlisten: Callable[[], None] | None = None
        self._last_seek = 0.0
        self._delayed = DelayedDelivery(self._delayed_due)
        self._compacted: CompactedViewSource | None = None
        self._view_next: Position | None = None
        """Reading ``read_compacted``: the next position to serve from the compacted view."""
        self.msgs_out = 0
        self.bytes_out = 0
        self.closed = False

    @property
    def _key_shared(self) -> KeySharedDispatcher[Consumer]:
        """Made by the first Key_Shared use: most subscriptions never need one, and an empty
        one is about half a kilobyte."""
        if self._key_shared_state is None:
            self._key_shared_state = KeySharedDispatcher()
        return self._key_shared_state

    # --- consumers ----------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        if sub_type != self.type:
            if self.consumers:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is of type {self.type.name}, not {sub_type.name}"
                )
            self.type = sub_type
        if self.type == SubscriptionType.EXCLUSIVE and self.consumers:
            raise ConsumerBusyError(f"exclusive subscription {self.name!r} already has a consumer")
        if self.type == SubscriptionType.KEY_SHARED:
            self._key_shared.add_consumer(consumer, self.consumers, self.cursor, self.ledger)
        self.consumers.append(consumer)
        if self._unlisten is None:
            self._unlisten = self.ledger.add_entries_listener(self.trigger)
        self._elect_active()

    def remove_consumer(self, consumer: Consumer) -> None:
        if not detach(consumer, self.consumers, self.type, self._key_shared_state):
            return
        returned = consumer.take_pending()
        if returned:
            self._count_redeliveries(returned)
            if self._redelivers_singly:
                self._replay.update(returned)
            else:
                asyncio.get_running_loop().create_task(self._rewind())
        if not self.consumers and self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self._elect_active()
        self.trigger()

    @property
    def _redelivers_singly(self) -> bool:
        """Shared and Key_Shared redeliver positions; the others rewind the cursor."""
        return self.type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)

    @property
    def active_consumer(self) -> Consumer | None:
        return self._active

    def _elect_active(self) -> None:
        if self.type not in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            self._active = None
            return
        previous = self._active
        self._active = elect_active(self.consumers, self.partition_index)
        if self._active is None:
            return
        if self.type == SubscriptionType.FAILOVER and previous is not self._active:
            for consumer in self.consumers:
                consumer.link.active_consumer_changed(consumer, consumer is self._active)
            if previous is not None and previous in self.consumers:
                moved = previous.take_pending()
                self._count_redeliveries(moved)
                asyncio.get_running_loop().create_task(self._rewind())

    def consumer_for_key(self, key: bytes) -> Consumer | None:
        """Key_Shared: the consumer that owns a sticky key's hash slot now."""
        return self._key_shared.selector.select(key_hash(key))

    def should_expire(self) -> bool:
        """A non-durable subscription dies with its last consumer (after a seek grace)."""
        if self.durable or self.consumers:
            return False
        return time.monotonic() - self._last_seek > SEEK_GRACE_SECONDS

    def consumer_left(self, consumer: Consumer) -> None:
        """The consumer is gone (closed by its client or its connection lost)."""
        self.remove_consumer(consumer)
        if self.should_expire():
            self._on_expired(self)

    def disconnect(self, consumer: Consumer) -> None:
        """The broker closes the consumer; its client resubscribes."""
        self.consumer_left(consumer)
        consumer.link.close_consumer(consumer)

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

    def on_ack(self, consumer: Consumer, positions: Iterable[Position], cumulative: bool) -> None:
        if cumulative:
            for position in positions:
                consumer.forget_up_to(position)
                self.cursor.mark_delete(position)
                self._drop_tracking_up_to(position)
        else:
            acked = list(positions)
            for position in acked:
                if not consumer.forget(position):
                    for other in self.consumers:
                        if other.forget(position):
                            break
                self.redelivery_counts.pop(position, None)
                self._replay.discard(position)
                if self._key_shared_state is not None:
                    self._key_shared_state.forget(position)
            self.cursor.delete(acked)
        self.trigger()

    def on_batch_ack(self, consumer: Consumer, position: Position, unacked: list[int]) -> None:
        """Part of a batch acknowledged (batch-index acknowledgement): kept by the cursor
        (and stored with it), and the whole entry acknowledged once none of its messages
        is left."""
        if self.cursor.delete_batch_indexes(position, unacked):
            self.on_ack(consumer, [position], cumulative=False)

    def on_redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nack / ack timeout / explicit redelivery request from the client."""
        if positions is None:
            returned = consumer.take_pending()
        else:
            returned = [p for p in positions if consumer.forget(p)]
        self._count_redeliveries(returned)
        if self._redelivers_singly:
            self._replay.update(returned)
            self.trigger()
        else:
            if positions is not None:
                # Order matters here: everything in flight is sent again from the cursor.
                self._count_redeliveries(consumer.take_pending())
            asyncio.get_running_loop().create_task(self._rewind())

    def _count_redeliveries(self, positions: Iterable[Position]) -> None:
        for position in positions:
            self.redelivery_counts[position] = self.redelivery_counts.get(position, 0) + 1

    def _drop_tracking_up_to(self, position: Position) -> None:
        for p in [p for p in self.redelivery_counts if p <= position]:
            del self.redelivery_counts[p]
        if self._replay:
            self._replay = {p for p in self._replay if p > position}
        if self._key_shared_state is not None:
            self._key_shared_state.forget_up_to(position)

    async def _rewind(self) -> None:
        async with self._lock:
            for consumer in self.consumers:
                consumer.take_pending()
            self.cursor.rewind()
            if self._compacted is not None:
                self._view_next = self._first_unacknowledged()
        self.trigger()

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
            self._replay.clear()
            self.redelivery_counts.clear()
            if self._key_shared_state is not None:
                self._key_shared_state.clear()
            self._delayed.clear()
            if self._compacted is not None:
                self._view_next = position
            self._last_seek = time.monotonic()

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
                if not await self._dispatch_once() and not self._again:
                    return
        except BrokerError as exc:
            log.warning("dispatch on %s/%s paused: %s", self.ledger.name, self.name, exc)
            asyncio.get_running_loop().call_later(1.0, self.trigger)
        except Exception:
            log.exception("dispatch on %s/%s failed", self.ledger.name, self.name)
            asyncio.get_running_loop().call_later(1.0, self.trigger)

    def _targets(self) -> list[Consumer]:
        if self.type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            active = self._active
            return [active] if active and active.permits > 0 and active.writable else []
        return [c for c in self.consumers if self._can_take(c)]

    def _can_take(self, consumer: Consumer) -> bool:
        limit = self.config.max_unacked_messages_per_consumer
        return (
            consumer.permits > 0
            and consumer.writable
            and (limit <= 0 or consumer.unacked_messages < limit)
        )

    async def _dispatch_once(self) -> bool:
        if self.type == SubscriptionType.KEY_SHARED:
            return await self._dispatch_by_key()
        async with self._lock:
            targets = self._targets()
            if not targets:
                return False
            budget = min(
                sum(c.permits for c in targets),
                self.config.dispatcher_max_read_batch_size,
            )
            if self._replay:
                entries = await self._read_replay(budget)
            elif (compacted := await self._read_compacted(budget)) is not None:
                entries = compacted
            elif self.cursor.has_more_entries():
                entries = await self.cursor.read_entries(budget)
            else:
                return False
            if not entries:
                return bool(self._replay)
            ready = [e for e in entries if not self._hold(e)]
            if ready:
                self._send(ready, self._targets() or targets)
            return True

    # --- compacted reads ----------------------------------------------------------------
    def read_compacted(self, view: CompactedViewSource, start: Position | None) -> None:
        """Serve the compacted view up to its horizon from ``start`` (None: from the first
        unacknowledged position), then the topic after the horizon (``read_compacted``)."""
        self._compacted = view
        self._view_next = start if start is not None else self._first_unacknowledged()

    def _first_unacknowledged(self) -> Position:
        """Compacted data may lie in trimmed ledgers: nothing acknowledged means all of it."""
        mark_delete = self.cursor.mark_delete_position
        if mark_delete < self.ledger.first_position() and mark_delete.entry_id < 0:
            return Position(-1, -1)
        return Position(mark_delete.ledger_id, mark_delete.entry_id + 1)

    async def _read_compacted(self, budget: int) -> list[Entry] | None:
        """Entries of the compacted view, or None once the view is behind the reader."""
        if self._compacted is None or self._view_next is None:
            return None
        view = await self._compacted()
        if view is None:
            self._view_next = None
            return None
        while True:
            chunk = view.read(self._view_next, budget)
            if not chunk:  # the topic goes on after the horizon
                self._view_next = None
                after = Position(view.horizon.ledger_id, view.horizon.entry_id + 1)
                if self.cursor.read_position < after:
                    self.cursor.seek(after)
                return None
            last = chunk[-1].position
            self._view_next = Position(last.ledger_id, last.entry_id + 1)
            ready = [e for e in chunk if not self.cursor.is_acknowledged(e.position)]
            if ready:
                return ready

    def _hold(self, entry: Entry) -> bool:
        """Shared and Key_Shared subscriptions keep a message until its delivery time."""
        return (
            self.config.delayed_delivery_enabled
            and self.type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)
            and self._delayed.hold(entry)
        )

    def _delayed_due(self, positions: list[Position]) -> None:
        self._replay.update(positions)
        self.trigger()

    async def _read_replay(self, budget: int) -> list[Entry]:
        positions = sorted(self._replay)[:budget]
        entries = []
        for position in positions:
            self._replay.discard(position)
            if self.cursor.is_acknowledged(position):
                continue
            try:
                entries.append(await self.ledger.read_entry(position))
            except BrokerError as exc:
                if exc.retriable:
                    self._replay.add(position)
                    raise
                log.warning("dropping redelivery of %s on %s: %s", position, self.name, exc)
        return entries

    async def _dispatch_by_key(self) -> bool:
        async with self._lock:
            chosen = await self._key_shared.dispatch(
                self.consumers,
                self._can_take,
                self._replay,
                self.cursor,
                self.ledger,
                self.config.dispatcher_max_read_batch_size,
                self._hold,
            )
            per_consumer: dict[Consumer, list[Delivery]] = {}
            for consumer, entry, count in chosen.deliveries:
                self._charge(per_consumer, consumer, entry, count)
            for consumer, batch in per_consumer.items():
                consumer.send(batch)
            return chosen.progressed

    def _send(self, entries: list[Entry], targets: list[Consumer]) -> None:
        per_consumer: dict[Consumer, list[Delivery]] = {}
        for entry in entries:
            self._charge(per_consumer, self._pick(targets), entry, messages_in_entry(entry))
        for consumer, batch in per_consumer.items():
            consumer.send(batch)

    def _charge(
        self,
        per_consumer: dict[Consumer, list[Delivery]],
        consumer: Consumer,
        entry: Entry,
        count: int,
    ) -> None:
        """Charge the consumer's permits for an entry and queue it for its one write."""
        redeliveries = self.redelivery_counts.get(entry.position, 0)
        ack_set = self.cursor.batch_ack_set(entry.position)
        per_consumer.setdefault(consumer, []).append(Delivery(entry, count, redeliveries, ack_set))
        consumer.permits -= count
        self.msgs_out += count
        self.bytes_out += len(entry.data)

    def _pick(self, targets: list[Consumer]) -> Consumer:
        if len(targets) == 1:
            return targets[0]
        for _ in range(len(targets)):
            self._rr_index = (self._rr_index + 1) % len(targets)
            candidate = targets[self._rr_index]
            if candidate.permits > 0:
                return candidate
        return max(targets, key=lambda c: c.permits)

    # --- lifecycle and stats --------------------------------------------------------
    async def close(self) -> None:
        self.closed = True
        self._delayed.clear()
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def backlog(self) -> int:
        return self.cursor.backlog()

    def stats(self) -> dict[str, object]:
        return {
            "type": PULSAR_TYPE_NAMES[self.type],
            "msgBacklog": self.backlog(),
            "msgOutCounter": self.msgs_out,
            "bytesOutCounter": self.bytes_out,
            "isDurable": self.durable,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "msgDelayed": len(self._delayed),
            "activeConsumerName": self._active.name if self._active else None,
            "consumers": [self._consumer_stats(c) for c in self.consumers],
        }

    def _consumer_stats(self, consumer: Consumer) -> dict[str, object]:
        stats = consumer.stats()
        if self.type == SubscriptionType.KEY_SHARED:
            ranges = self._key_shared.selector.ranges_of(consumer)
            stats["keyHashRanges"] = [f"[{start}, {end}]" for start, end in ranges]
        return stats


def detach(
    consumer: Consumer,
    consumers: list[Consumer],
    sub_type: SubscriptionType,
    key_shared: KeySharedDispatcher[Consumer] | None,
) -> bool:
    """Take the consumer off its subscription's list (and its Key_Shared slots); False
    if it was not on it. A Key_Shared consumer was added through ``key_shared``, so it
    exists whenever it matters."""
    if consumer not in consumers:
        return False
    consumers.remove(consumer)
    consumer.closed = True
    if sub_type == SubscriptionType.KEY_SHARED and key_shared is not None:
        key_shared.remove_consumer(consumer)
    return True


def elect_active(consumers: Sequence[Consumer], partition_index: int) -> Consumer | None:
    """Exclusive and Failover: the consumer that receives, by priority level and name (a
    partition picks its own among them, so partitions spread over the consumers)."""
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    return ordered[partition_index % len(ordered) if partition_index >= 0 else 0]


PULSAR_TYPE_NAMES = {
    SubscriptionType.EXCLUSIVE: "Exclusive",
    SubscriptionType.SHARED: "Shared",
    SubscriptionType.FAILOVER: "Failover",
    SubscriptionType.KEY_SHARED: "Key_Shared",
}


def messages_in_entry(entry: Entry) -> int:
    """How many messages an entry holds (a batch counts each of its messages)."""
    try:
        metadata = parse_metadata_only(entry.data)
    except BrokerError:
        return 1
    if metadata.HasField("num_messages_in_batch"):
        return max(1, metadata.num_messages_in_batch)
    return 1
