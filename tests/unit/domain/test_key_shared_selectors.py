"""Key_Shared selectors as Pulsar's: the classic range split
(``subscriptionKeySharedUseConsistentHashing=false``) and the ring's point keys."""

from __future__ import annotations

from dedup_broker.domain.consumer import Consumer
from dedup_broker.domain.key_hash import HASH_RANGE_SIZE, KeySharedSettings, murmur3_32
from dedup_broker.domain.key_shared_selectors import (
    ConsistentHashSelector,
    RangeSplitSelector,
)
from harness.domain_links import ConsumerSide


def consumers(*names: str) -> list[Consumer]:
    return [Consumer(ConsumerSide(), i, name, "s") for i, name in enumerate(names)]


def test_the_classic_split_halves_the_largest_range_for_each_new_consumer() -> None:
    selector: RangeSplitSelector[Consumer] = RangeSplitSelector()
    a, b, c, d = consumers("a", "b", "c", "d")
    selector.add(a, KeySharedSettings())
    assert selector.ranges_of(a) == [(0, HASH_RANGE_SIZE - 1)]
    for consumer in (b, c, d):
        selector.add(consumer, KeySharedSettings())
    # b took [0, 32768]; c the lower half of it (the first of two equal ranges); d the
    # lower half of a's.
    assert selector.ranges_of(c) == [(0, 16384)]
    assert selector.ranges_of(b) == [(16385, 32768)]
    assert selector.ranges_of(d) == [(32769, 49152)]
    assert selector.ranges_of(a) == [(49153, HASH_RANGE_SIZE - 1)]
    assert selector.select(0) is c and selector.select(49152) is d and selector.select(65535) is a
    selector.remove(a)  # the top range's owner left: the consumer below moves up
    assert selector.ranges_of(d) == [(32769, HASH_RANGE_SIZE - 1)]
    selector.remove(b)  # another range: it goes to the consumer above
    assert selector.select(20000) is d
    assert selector.ranges_of(c) == [(0, 16384)]


def test_ring_points_are_pulsars_keys_of_name_index_and_point() -> None:
    """Pulsar 4 places consumer ``name``'s i-th point at the key hash of
    ``name \\0 0 \\0 i``; a second consumer of the same name uses index 1."""
    selector: ConsistentHashSelector[Consumer] = ConsistentHashSelector()
    (first,) = consumers("orders")
    selector.add(first, KeySharedSettings())
    for i in (0, 42, 99):
        point = (murmur3_32(f"orders\0{0}\0{i}".encode()) & 0x7FFFFFFF) % HASH_RANGE_SIZE
        assert selector.select(point) is first
    (twin,) = consumers("orders")
    selector.add(twin, KeySharedSettings())
    point = (murmur3_32(b"orders\x001\x007") & 0x7FFFFFFF) % HASH_RANGE_SIZE
    assert selector.select(point) is twin
    selector.remove(twin)
    assert selector.select(point) is first


def test_consumers_with_similar_names_share_the_ring_fairly() -> None:
    selector: ConsistentHashSelector[Consumer] = ConsistentHashSelector()
    group = consumers("consumer-1", "consumer-11", "consumer-110")
    for consumer in group:
        selector.add(consumer, KeySharedSettings())
    for consumer in group:
        owned = sum(end - start + 1 for start, end in selector.ranges_of(consumer))
        assert 0.2 < owned / HASH_RANGE_SIZE < 0.47, consumer.name
