"""Several writers (a namespace scope, a partitioned topic): a group's keys are claimed
in Redis in one round trip (``claims.py``), then each SEND, in order, is appended whole
(every key new, none repeated in the group: the common case) or decided per message;
the keys of writes that did not happen are freed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from dedup_broker.domain_base.outcomes import PublishOutcome
from dedup_broker.errors import BrokerError
from dedup_broker.key_dedup.claims import GroupKeys, ScopeRebuildingError, repeated_keys
from dedup_broker.key_dedup.sends import (
    READY_WAIT_SECONDS,
    REDIS_ASK_AGAIN_SECONDS,
    KeyDedupNotReadyError,
    PreparedSend,
    ProducerGoneError,
    finish_duplicate,
    highest_sequence_id,
)
from dedup_broker.key_dedup.store import KeyStoreUnavailableError
from dedup_broker.key_dedup.window import KeyDedupPolicy, kept_records_compiled, sort_entry
from dedup_broker.protocol.batch_rewrite import rewrite_batch
from dedup_broker.protocol.framing import parse_message

if TYPE_CHECKING:
    from dedup_broker.key_dedup.scope import KeyScope
    from dedup_broker.key_dedup.topic import TopicKeyDedup


async def decide_claimed(
    topic: TopicKeyDedup, prepared: list[PreparedSend], scope: KeyScope, policy: KeyDedupPolicy
) -> None:
    """A group of SENDs of a scope with several writers: its keys claimed in one round
    trip, then each SEND appended whole or decided per message, in order; the keys of
    writes that did not happen freed."""
    claims = GroupKeys(scope, policy, topic.service, topic.owner)
    key_lists = [p.keys for p in prepared if p.keys]
    try:
        try:
            await _lookup(topic, claims, key_lists)
        except ScopeRebuildingError:
            # Rebuilding from the log takes moments: wait for it rather than fail.
            claims.clear()
            if not await topic.wait_ready():
                raise KeyDedupNotReadyError("the key window is being rebuilt") from None
            await _lookup(topic, claims, key_lists)
    except BrokerError as exc:
        for p in prepared:
            topic.refuse(p.item, exc)
        return
    except asyncio.CancelledError:
        # Closed while claiming: free the keys, other topics of the scope wait on them.
        topic.outcomes.release(list(claims.owned))
        raise
    used: set[bytes] = set()
    # Keys the group may have to free: those of SENDs not appended whole (a SEND
    # appended whole shares no key with another SEND of the group).
    left: list[bytes] = []
    # All new and distinct (the common case): every SEND with keys is kept whole.
    repeated = set() if claims.distinct else repeated_keys(key_lists)
    unusual = claims.unusual | repeated
    done = 0
    try:
        for p in prepared:
            if not _kept_whole(topic, p, unusual, left, claims.distinct):
                left += filter(None, p.keys or ())
                await _decide(topic, claims, p, used, repeated)
            done += 1
    finally:
        for p in prepared[done:]:
            left += filter(None, p.keys or ())
        if left:
            topic.outcomes.release(list(claims.owned.intersection(left) - used))


def _kept_whole(
    topic: TopicKeyDedup, p: PreparedSend, unusual: set[bytes], left: list[bytes], distinct: bool
) -> bool:
    """Appends a SEND whole, as ``_decide`` would conclude without a verdict per
    message, when each of its messages has a key of its own (``distinct``: known
    already) that the group's lookup found NEW and no other SEND of the group
    repeats. True when it was handled so (its answer is the append's; the keys of an
    entry not appended go to ``left``)."""
    keys, item, scope = p.keys, p.item, topic.scope
    if not keys or scope is None or item.producer.closed or None in keys:
        return False
    if not unusual.isdisjoint(keys) or not (distinct or len(set(keys)) == len(keys)):
        return False
    kept = cast("list[bytes]", keys)
    if topic.append_entry(item, item.entry, item.metadata, [], topic.outcomes.claimed(scope, kept)):
        scope.kept += len(kept)
    else:
        left += kept
    return True


async def _lookup(
    topic: TopicKeyDedup, claims: GroupKeys, key_lists: list[list[bytes | None]]
) -> None:
    """The group's key states. A Redis that cannot be reached is asked again for up to
    ``READY_WAIT_SECONDS`` (a restart takes about a second) before the SENDs fail:
    the official clients answer each send error by dropping their connection, with
    every producer and consumer on it."""
    deadline = asyncio.get_running_loop().time() + READY_WAIT_SECONDS
    while True:
        try:
            await claims.lookup(key_lists)
            return
        except KeyStoreUnavailableError:
            if asyncio.get_running_loop().time() >= deadline or topic.closed:
                raise
            claims.clear()
            await asyncio.sleep(REDIS_ASK_AGAIN_SECONDS)


async def _decide(
    topic: TopicKeyDedup, claims: GroupKeys, p: PreparedSend, used: set[bytes], repeated: set[bytes]
) -> None:
    """One SEND: drop its repeats, append the rest, answer in the producer's order
    (a repeat of a write in flight: after that write, without holding later SENDs)."""
    scope, states, futures = claims.scope, claims.states, claims.futures
    item = p.item
    if item.producer.closed:
        item.finish(PublishOutcome.failed(ProducerGoneError("the producer closed")))
        return
    keys = p.keys
    if keys is None:
        scope.unchecked += max(item.metadata.num_messages_in_batch, 1)
        topic.append_entry(item, item.entry, item.metadata, [], None)
        return
    if futures:  # a batch may carry one key twice: settle each key once
        settled = [k for k in futures.keys() & set(keys) if futures[k].done()]
        if settled:
            await claims.settle(settled)
    sorting = sort_entry(keys, states, futures)
    if sorting is None:  # a key held by a write another broker is making
        topic.refuse(item, KeyDedupNotReadyError("an earlier copy is being written"))
        return
    dropped, unchecked = sorting.dropped, sorting.unchecked
    scope.unchecked += unchecked
    scope.dropped += dropped
    if dropped == len(sorting.keep):
        finish_duplicate(item, sorting.after)
        return
    entry, metadata = item.entry, item.metadata
    if dropped:  # the kept messages' records, as sent
        payload = parse_message(entry).payload
        highest = highest_sequence_id(item.send, metadata, payload)
        raw = kept_records_compiled(metadata, payload, sorting.keep)
        metadata, entry = rewrite_batch(metadata, payload, sorting.keep, highest, raw)
    written = topic.outcomes.claimed(scope, sorting.keys)
    if topic.append_entry(item, entry, metadata, sorting.after, written):
        claims.kept(sorting.keys, used, repeated)
        scope.kept += unchecked
