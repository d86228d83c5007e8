"""Key_Shared dispatch: every key's messages go to one consumer, in the order of the log.

Consumers own slots of the hash range ``0 .. 65535`` (``key_hash.py``):

* ``AUTO_SPLIT``: a consistent-hash ring (Pulsar's default,
  ``subscriptionKeySharedUseConsistentHashing`` with 100 replica points per consumer). A
  consumer that joins takes over some slots of the others; one that leaves hands its slots
  to the next points of the ring. No other key moves. With consistent hashing off,
  Pulsar's classic split: each joining consumer takes half of the largest range.
  (``key_shared_selectors.py``)
* ``STICKY``: each consumer declares its ranges; overlapping another consumer's ranges is
  refused (``ConsumerAssignError``). Entries of keys no consumer covers wait.

Order per key holds through every change:

* Entries to redeliver (a consumer left, nack, redeliver-unacknowledged) wait in the
  subscription's replay set and go first; a newer entry of a key that still has one
  waiting is held back in the replay set too, behind it. A round's choices are checked
  again after its last read: a consumer may have left while it read, and what it held
  is then waiting (``KeySharedRouting._recheck``).
* A consumer that joins while earlier entries are unacknowledged is *recently joined*
  (Pulsar's classic rule): it gets entries before the read position at which it joined,
  but nothing from that position on until everything before it is acknowledged, since
  the previous owner of its keys may still hold some of them. ``allowOutOfOrderDelivery``
  (taken from the subscription's first consumer) turns this off.
* A batch entry is dispatched by its first message's key (Pulsar does the same; with the
  clients' key-based batching that is the one key of the batch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, NamedTuple

from dedup_broker.domain.key_hash import KeySharedMode, KeySharedSettings, key_hash, sticky_key
from dedup_broker.domain.key_shared_selectors import (
    C,
    ConsistentHashSelector,
    ConsumerAssignError,
    RangeSplitSelector,
    Selector,
    StickySelector,
)
from dedup_broker.errors import BrokerError
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import Entry, Position

if TYPE_CHECKING:
    from dedup_broker.storage.api import ManagedCursor, ManagedLedger

log = logging.getLogger(__name__)

LOOK_AHEAD_LIMIT = 20000
"""Entries held back in the replay set before reading stops (Pulsar's
``keySharedLookAheadMsgInReplayThresholdPerSubscription``)."""


class EntryKey(NamedTuple):
    """What dispatch needs of an entry, from one parse of its metadata."""

    hash: int
    messages: int


def entry_key(entry: Entry) -> EntryKey:
    try:
        metadata = parse_metadata_only(entry.data)
    except BrokerError:
        return EntryKey(key_hash(b""), 1)
    messages = 1
    if metadata.HasField("num_messages_in_batch"):
        messages = max(1, metadata.num_messages_in_batch)
    return EntryKey(key_hash(sticky_key(metadata)), messages)


@dataclass
class KeySharedRound(Generic[C]):
    """What one dispatch round decided: entries per consumer, and whether it moved on."""

    deliveries: list[tuple[C, Entry, int]] = field(default_factory=list)
    progressed: bool = False
    entries_read: int = 0
    """Entries the round read from storage (replays and new ones)."""


class KeySharedRouting(Generic[C]):
    """The Key_Shared state of a subscription: slot owners, recently joined consumers and
    the hash of every entry sent or held back (acks forget it)."""

    def __init__(self, consistent_hashing: bool = True) -> None:
        """``consistent_hashing``: ``subscriptionKeySharedUseConsistentHashing`` (AUTO_SPLIT
        on the ring; off: Pulsar's classic range split)."""
        self.consistent_hashing = consistent_hashing
        self.settings: KeySharedSettings | None = None
        self.selector: Selector[C] = self._auto_split()
        self.joined_at: dict[C, Position] = {}
        self.hashes: dict[Position, int] = {}

    # --- consumers ------------------------------------------------------------------
    def joined(
        self,
        consumer: C,
        existing: Sequence[C],
        cursor: ManagedCursor,
        ledger: ManagedLedger,
    ) -> None:
        """``consumer`` (assigned already) joined ``existing`` at the cursor's read
        position: recently joined while earlier entries are unacknowledged."""
        assert self.settings is not None
        if existing and not self.settings.allow_out_of_order:
            joined = cursor.read_position
            if cursor.mark_delete_position < ledger.previous_position(joined):
                self.joined_at[consumer] = joined

    def assign(self, consumer: C, existing: Sequence[C]) -> None:
        """Give the consumer its hash slots (the first consumer sets the mode)."""
        settings = consumer.key_shared or KeySharedSettings()
        if not existing or self.settings is None:
            self.settings = settings
            self.selector = (
                StickySelector() if settings.mode == KeySharedMode.STICKY else self._auto_split()
            )
        elif settings.mode != self.settings.mode:
            raise ConsumerAssignError(
                f"Subscription is in {self.settings.mode.name} mode, "
                f"the consumer asked for {settings.mode.name}"
            )
        self.selector.add(consumer, settings)

    def _auto_split(self) -> Selector[C]:
        return ConsistentHashSelector() if self.consistent_hashing else RangeSplitSelector()

    def remove_consumer(self, consumer: C) -> None:
        self.selector.remove(consumer)
        self.joined_at.pop(consumer, None)

    def release_joined(self, cursor: ManagedCursor, ledger: ManagedLedger) -> None:
        """Recently joined consumers whose earlier entries are all acknowledged are free."""
        if not self.joined_at:
            return
        mark_delete = cursor.mark_delete_position
        for consumer, joined in list(self.joined_at.items()):
            if mark_delete >= ledger.previous_position(joined):
                del self.joined_at[consumer]

    # --- acks -----------------------------------------------------------------------
    def forget(self, position: Position) -> None:
        self.hashes.pop(position, None)

    def forget_up_to(self, position: Position) -> None:
        for p in [p for p in self.hashes if p <= position]:
            del self.hashes[p]

    def clear(self) -> None:
        self.hashes.clear()
        self.joined_at.clear()

    # --- dispatching ----------------------------------------------------------------
    async def dispatch(
        self,
        consumers: Sequence[C],
        eligible: Callable[[C], bool],
        replay: set[Position],
        cursor: ManagedCursor,
        ledger: ManagedLedger,
        max_entries: int,
        hold: Callable[[Entry], bool] = lambda entry: False,
    ) -> KeySharedRound[C]:
        """Choose the entries of one round: waiting ones first, then new ones."""
        self.release_joined(cursor, ledger)
        room = {c: c.permits for c in consumers if eligible(c)}
        result: KeySharedRound[C] = KeySharedRound()
        if not room:
            return result
        blocked: set[int] = set()
        budget = min(sum(room.values()), max_entries)
        for position in sorted(replay):
            if len(result.deliveries) >= budget:
                break
            if cursor.is_acknowledged(position):
                replay.discard(position)
                self.forget(position)
                result.progressed = True
                continue
            slot = self.hashes.get(position)
            entry: Entry | None = None
            if slot is None:
                entry = await self._read(ledger, position, replay)
                if entry is None:
                    result.progressed = True
                    continue
                result.entries_read += 1
                slot = self.hashes[position] = entry_key(entry).hash
            if slot in blocked:
                continue
            consumer = self._owner(slot, position, room)
            if consumer is None:
                blocked.add(slot)
                continue
            if entry is None:
                entry = await self._read(ledger, position, replay)
                if entry is None:
                    result.progressed = True
                    continue
                result.entries_read += 1
            replay.discard(position)
            messages = entry_key(entry).messages
            room[consumer] -= messages
            result.deliveries.append((consumer, entry, messages))
        wanted = budget - len(result.deliveries)
        if wanted <= 0 or len(replay) >= LOOK_AHEAD_LIMIT or not cursor.has_more_entries():
            return self._recheck(result, consumers, replay)
        entries = await cursor.read_entries(wanted)
        result.entries_read += len(entries)
        # Taken after the read: a consumer that left meanwhile gave back what it held.
        blocked.update(self.hashes.get(p, -1) for p in replay)
        for entry in entries:
            result.progressed = True
            if hold(entry):  # delayed delivery: back when due, through ``replay``
                continue
            key = entry_key(entry)
            self.hashes[entry.position] = key.hash
            consumer = None if key.hash in blocked else self._owner(key.hash, entry.position, room)
            if consumer is None:
                blocked.add(key.hash)
                replay.add(entry.position)
                continue
            room[consumer] -= key.messages
            result.deliveries.append((consumer, entry, key.messages))
        return self._recheck(result, consumers, replay)

    def _recheck(
        self, result: KeySharedRound[C], consumers: Sequence[C], replay: set[Position]
    ) -> KeySharedRound[C]:
        """The round's choices checked again once its last read is done (nothing can change
        between here and the send). While it read, a consumer may have left: what it held
        is now in ``replay``, and its keys have other owners. An entry chosen for a consumer
        that left, or of a key with an older entry in ``replay``, goes back to ``replay``,
        behind it, so that no entry of a key overtakes an older one waiting there.
        ``result.deliveries`` are in position order (all of ``replay`` precedes what the
        cursor reads)."""
        if result.deliveries:
            live = set(consumers)
            oldest: dict[int, Position] = {}
            for position in replay:
                slot = self.hashes.get(position)
                if slot is not None and (slot not in oldest or position < oldest[slot]):
                    oldest[slot] = position
            kept: list[tuple[C, Entry, int]] = []
            for chosen in result.deliveries:
                consumer, entry, _ = chosen
                position = entry.position
                slot = self.hashes.get(position)
                if slot is None:
                    slot = self.hashes[position] = entry_key(entry).hash
                waiting = oldest.get(slot)
                if consumer in live and (waiting is None or position < waiting):
                    kept.append(chosen)
                    continue
                replay.add(position)
                if waiting is None or position < waiting:
                    oldest[slot] = position
            if len(kept) < len(result.deliveries):
                result.progressed = True
                result.deliveries = kept
        result.progressed = result.progressed or bool(result.deliveries)
        return result

    def _owner(self, slot: int, position: Position, room: dict[C, int]) -> C | None:
        """The consumer that may take this entry now, if any."""
        consumer = self.selector.select(slot)
        if consumer is None or room.get(consumer, 0) <= 0:
            return None
        joined = self.joined_at.get(consumer)
        if joined is not None and position >= joined:
            return None
        return consumer

    async def _read(
        self, ledger: ManagedLedger, position: Position, replay: set[Position]
    ) -> Entry | None:
        try:
            return await ledger.read_entry(position)
        except BrokerError as exc:
            if exc.retriable:
                raise
            log.warning("dropping redelivery of %s: %s", position, exc)
            replay.discard(position)
            self.forget(position)
            return None
