"""Which consumer of an Exclusive or Failover subscription is active, as Pulsar picks it.

Pulsar sorts the consumers by priority level (0 first), then by name (joining order
breaks ties), and looks only at those of the best level. A partition takes the
``partition_index % n``-th of them, so the partitions of a topic spread evenly over the
consumers of the best level whatever joins below it; a non-partitioned topic (and every
partition with ``activeConsumerFailoverConsistentHashing``) takes the consumer that owns
the topic name's hash on a ring of 100 points per consumer name, so that many topics
spread over the same consumers. Both hashes are Pulsar's (MurmurHash3, 31 bits).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence

from dedup_broker.domain.consumer import Consumer
from dedup_broker.domain.key_hash import murmur3_32

RING_POINTS = 100
"""Points each consumer name has on the ring (Pulsar's ``CONSUMER_CONSISTENT_HASH_REPLICAS``)."""


def elect_active(
    consumers: Sequence[Consumer], partition_index: int, topic: str, consistent_hashing: bool
) -> Consumer | None:
    """The active consumer of a subscription of ``topic`` (its full name)."""
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    best = [c for c in ordered if c.priority_level == ordered[0].priority_level]
    if len(best) == 1:  # every rule picks it: no ring is built for the usual lone consumer
        return best[0]
    if partition_index >= 0 and not consistent_hashing:
        return best[partition_index % len(best)]
    return best[ring_owner([c.name for c in best], topic)]


def ring_owner(names: Sequence[str], topic: str) -> int:
    """The index in ``names`` of the one owning ``topic``'s point: the first point at or
    after the topic's hash, or the ring's first one (a later name takes a point two share)."""
    ring: dict[int, int] = {}
    for index, name in enumerate(names):
        for point in _points(name):
            ring[point] = index
    points = sorted(ring)
    at = bisect.bisect_left(points, pulsar_hash(topic.encode()))
    return ring[points[at if at < len(points) else 0]]


@functools.lru_cache(maxsize=256)
def _points(name: str) -> tuple[int, ...]:
    """A consumer name's points: the hashes of ``name + "0"`` to ``name + "99"`` (kept for
    the names elections meet again: about 4 KB each, so only a few hundred)."""
    return tuple(pulsar_hash(f"{name}{j}".encode()) for j in range(RING_POINTS))


def pulsar_hash(data: bytes) -> int:
    """Pulsar's ``Murmur3_32Hash``: MurmurHash3 x86 32 bits, seed 0, the sign bit cleared."""
    return murmur3_32(data) & 0x7FFFFFFF
