"""Which consumer of an Exclusive or Failover subscription is active: partitions in turn
over the consumers of the best priority level, non-partitioned topics on Pulsar's ring."""

from __future__ import annotations

from collections import Counter

import pytest

from dedup_broker.domain.active_consumers import _points, elect_active, pulsar_hash, ring_owner
from dedup_broker.domain.consumer import Consumer
from harness.domain_links import ConsumerSide

TOPIC = "persistent://public/default/my-topic"


def consumers(*levels: int) -> list[Consumer]:
    """``c0``, ``c1``, ... of these priority levels, in this joining order."""
    side = ConsumerSide()
    return [Consumer(side, i, f"c{i}", "sub", priority_level=p) for i, p in enumerate(levels)]


def spread(joined: list[Consumer], partitions: int = 12) -> Counter[str]:
    """How many partitions of a partitioned topic each consumer is active for."""
    chosen = [
        elect_active(joined, index, f"{TOPIC}-partition-{index}", False)
        for index in range(partitions)
    ]
    return Counter(c.name for c in chosen if c is not None)


def test_partitions_spread_over_the_consumers_of_the_best_level_only() -> None:
    """12 partitions, four consumers of level 0 and two of level 1 (joined first): 3 each
    for the level-0 ones, none for the others; alone, the level-1 ones share them."""
    joined = consumers(1, 1, 0, 0, 0, 0)
    assert spread(joined) == {"c2": 3, "c3": 3, "c4": 3, "c5": 3}
    assert spread(joined[:2]) == {"c0": 6, "c1": 6}
    assert spread(consumers(0, 0, 0)) == {"c0": 4, "c1": 4, "c2": 4}


def test_partitions_go_in_turn_by_name() -> None:
    joined = consumers(0, 0, 0)
    joined.reverse()  # the joining order does not matter
    chosen = [elect_active(joined, i, TOPIC, False) for i in range(4)]
    assert [c.name if c else None for c in chosen] == ["c0", "c1", "c2", "c0"]


@pytest.mark.parametrize(
    ("topic", "names", "owner", "topic_hash"),
    [
        # Computed with Pulsar 4.0.7's own classes (Murmur3_32Hash, Murmur3Hash32, TreeMap).
        (
            TOPIC,
            ["consumer-0", "consumer-1", "consumer-2", "consumer-3", "consumer-4"],
            3,
            825144864,
        ),
        (
            f"{TOPIC}-partition-3",
            ["consumer-0", "consumer-1", "consumer-2", "consumer-3"],
            3,
            852581680,
        ),
        ("persistent://tenant/ns/orders", ["c1", "c2"], 1, 1813874707),
        ("persistent://public/default/failover-handover", ["first", "second"], 1, 1623726192),
        ("persistent://public/default/orders", ["a", "b"], 0, 2121668789),
        ("non-persistent://public/default/ticks", ["a", "b"], 1, 379639699),
    ],
)
def test_the_ring_is_pulsars(topic: str, names: list[str], owner: int, topic_hash: int) -> None:
    assert pulsar_hash(topic.encode()) == topic_hash
    assert ring_owner(names, topic) == owner


def test_a_non_partitioned_topic_picks_on_the_ring_among_the_best_level() -> None:
    joined = consumers(0, 0, 0, 0, 0)
    for each in joined:
        each.name = f"consumer-{each.consumer_id}"
    assert elect_active(joined, -1, TOPIC, False) is joined[3]
    joined[3].priority_level = 1  # out of the best level: the ring holds the four others
    others = [joined[i] for i in (0, 1, 2, 4)]
    expected = others[ring_owner([c.name for c in others], TOPIC)]
    assert elect_active(joined, -1, TOPIC, False) is expected


def test_consistent_hashing_puts_partitions_on_the_ring_too() -> None:
    joined = consumers(0, 0, 0, 0)
    for each in joined:
        each.name = f"consumer-{each.consumer_id}"
    partition = f"{TOPIC}-partition-3"
    assert elect_active(joined, 3, partition, True) is joined[3]
    assert elect_active(joined, 1, f"{TOPIC}-partition-1", False) is joined[1]
    assert elect_active([], 0, partition, False) is None


def test_a_lone_consumer_of_the_best_level_is_elected_without_a_ring() -> None:
    """Thousands of idle topics with one consumer each (named at random by their clients)
    keep no ring points: about 4 KB per name, once the largest share of a topic's memory."""
    side = ConsumerSide()
    _points.cache_clear()
    for i in range(1_000):
        lone = Consumer(side, i, f"random-{i}", "sub")
        below = Consumer(side, i + 1, f"other-{i}", "sub", priority_level=1)
        assert elect_active([below, lone], -1, f"{TOPIC}-{i}", False) is lone
    assert _points.cache_info().currsize == 0
    # Rings are built for several consumers of one level; the names kept stay few.
    for i in range(1_000):
        pair = [Consumer(side, 0, f"a-{i}", "sub"), Consumer(side, 1, f"b-{i}", "sub")]
        assert elect_active(pair, -1, f"{TOPIC}-{i}", False) in pair
    assert _points.cache_info().currsize <= 256
