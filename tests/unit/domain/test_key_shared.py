"""Key_Shared: Pulsar's key hash, one consumer per key, order per key through consumers
leaving and joining, redelivery, STICKY ranges."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from dedup_broker.domain.consumer import Consumer, SubscriptionType
from dedup_broker.domain.key_hash import (
    HASH_RANGE_SIZE,
    NONE_KEY,
    KeySharedMode,
    KeySharedSettings,
    key_hash,
    murmur3_32,
    sticky_key,
)
from dedup_broker.domain.key_shared_selectors import ConsistentHashSelector, ConsumerAssignError
from dedup_broker.domain.topic import Topic
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.storage.values import Position
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker, settle

TOPIC = "persistent://public/default/keyed"
KEY_SHARED = SubscriptionType.KEY_SHARED


def at(entry: int) -> Position:
    return Position(1, entry)


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"", 0xFFFFFFFF, 0x81F16F39),
        (b"\x00\x00\x00\x00", 0, 0x2362F9DE),
        (b"\xff\xff\xff\xff", 0, 0x76293B50),
        (b"a", 0x9747B28C, 0x7FA09EA6),
        (b"ab", 0x9747B28C, 0x74875592),
        (b"abc", 0x9747B28C, 0xC84A62DD),
        (b"aaaa", 0x9747B28C, 0x5A97808A),
        (b"test", 0, 0xBA6BD213),
        (b"Hello, world!", 0x9747B28C, 0x24884CBA),
        (b"Hello, world!", 1234, 0xFAF6CDB3),
        (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
    ],
)
def test_murmur3_32_known_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmur3_32(data, seed) == expected


def test_the_key_is_the_ordering_key_then_the_partition_key_then_none() -> None:
    both = pb.MessageMetadata(ordering_key=b"order", partition_key="part")
    assert sticky_key(both) == b"order"
    assert sticky_key(pb.MessageMetadata(partition_key="part")) == b"part"
    encoded = pb.MessageMetadata(
        partition_key=base64.b64encode(b"\x00\x01").decode(), partition_key_b64_encoded=True
    )
    assert sticky_key(encoded) == b"\x00\x01"
    assert sticky_key(pb.MessageMetadata()) == NONE_KEY
    assert key_hash(b"test") == (0xBA6BD213 & 0x7FFFFFFF) % 65536 == 0xD213


async def keyed_topic(keys: list[str]) -> Topic:
    """One entry per key, in the order given."""
    topic = await MemoryBroker.configured().topic(TOPIC)
    producer = new_producer("p")
    topic.add_producer(producer)
    for seq, key in enumerate(keys):
        await publish(topic, producer, seq, partition_key=key)
    return topic


async def add_keys(topic: Topic, keys: list[str]) -> None:
    producer = topic.producers["p"]
    for seq, key in enumerate(keys, start=1000):
        await publish(topic, producer, seq, partition_key=key)


def key_of(keys: list[str], position: Position) -> str:
    """The key of an entry (``add_keys`` repeats the list the topic began with)."""
    return keys[position.entry_id % len(keys)]


async def test_auto_split_gives_each_key_to_one_consumer_in_order() -> None:
    keys = [f"key-{i % 12}" for i in range(60)]
    topic = await keyed_topic(keys)
    side = ConsumerSide()
    consumers = [await subscribe(topic, side, n, sub_type=KEY_SHARED) for n in "abc"]
    for consumer in consumers:
        consumer.subscription.on_flow(consumer, 100)
    await settle()
    owners: dict[str, set[str]] = {}
    for who, position, _ in side.delivered:
        owners.setdefault(key_of(keys, position), set()).add(who)
    assert all(len(names) == 1 for names in owners.values())
    assert len({name for names in owners.values() for name in names}) > 1
    assert sorted(p for _, p, _ in side.delivered) == [at(i) for i in range(60)]
    for name in "abc":
        assert side.positions_of(name) == sorted(side.positions_of(name))
    subscription = consumers[0].subscription
    for key, names in owners.items():
        owner = subscription.consumer_for_key(key.encode())
        assert owner is not None and {owner.name} == names


async def test_a_consumer_that_leaves_hands_its_keys_over_in_order() -> None:
    keys = [f"key-{i % 8}" for i in range(24)]
    topic = await keyed_topic(keys)
    side = ConsumerSide()
    a = await subscribe(topic, side, "a", sub_type=KEY_SHARED)
    b = await subscribe(topic, side, "b", sub_type=KEY_SHARED)
    subscription = a.subscription
    subscription.on_flow(a, 5)  # a gets some of its entries, the rest wait for permits
    subscription.on_flow(b, 100)
    await settle()
    sent_to_a = side.positions_of("a")
    assert len(sent_to_a) == 5
    subscription.on_ack(a, sent_to_a[:2], cumulative=False)
    before = side.positions_of("b")
    side.take()
    topic.consumer_closed(a)
    await settle()
    moved = side.take()
    assert all(who == "b" for who, _, _ in moved)
    # What a held unacknowledged comes first, counted as a redelivery, then the rest.
    assert [(p, count) for _, p, count in moved[:3]] == [(p, 1) for p in sent_to_a[2:]]
    after = [p for _, p, _ in moved]
    assert sorted(before + after + sent_to_a[:2]) == [at(i) for i in range(24)]
    for key in set(keys):
        order = [p for _, p, _ in moved if key_of(keys, p) == key]
        assert order == sorted(order)


async def test_a_joining_consumer_waits_until_earlier_entries_are_acknowledged() -> None:
    keys = [f"key-{i % 10}" for i in range(10)]
    topic = await keyed_topic(keys)
    side = ConsumerSide()
    a = await subscribe(topic, side, "a", sub_type=KEY_SHARED)
    subscription = a.subscription
    subscription.on_flow(a, 100)
    await settle()
    assert len(side.take()) == 10
    b = await subscribe(topic, side, "b", sub_type=KEY_SHARED)
    subscription.on_flow(b, 100)
    await add_keys(topic, keys)
    await settle()
    to_b = [k for k in keys if subscription.consumer_for_key(k.encode()) is b]
    assert to_b
    delivered = side.take()
    assert {key_of(keys, p) for _, p, _ in delivered} == set(keys) - set(to_b)
    assert all(who == "a" for who, _, _ in delivered)
    subscription.on_ack(a, [at(i) for i in range(10)], cumulative=False)
    await settle()
    released = side.take()
    assert [who for who, _, _ in released] == ["b"] * len(to_b)
    assert sorted(key_of(keys, p) for _, p, _ in released) == sorted(to_b)


async def test_out_of_order_delivery_lets_a_joining_consumer_start_at_once() -> None:
    keys = [f"key-{i % 10}" for i in range(10)]
    topic = await keyed_topic(keys)
    side = ConsumerSide()
    relaxed = KeySharedSettings(allow_out_of_order=True)
    a = await subscribe(topic, side, "a", sub_type=KEY_SHARED, key_shared=relaxed)
    a.subscription.on_flow(a, 100)
    await settle()
    side.take()
    b = await subscribe(topic, side, "b", sub_type=KEY_SHARED, key_shared=relaxed)
    b.subscription.on_flow(b, 100)
    await add_keys(topic, keys)
    await settle()
    assert len(side.positions_of("b")) > 0
    assert len(side.take()) == 10


async def test_redelivering_everything_keeps_each_keys_order() -> None:
    keys = ["x", "y", "x", "y", "x"]
    topic = await keyed_topic(keys)
    side = ConsumerSide()
    a = await subscribe(topic, side, "a", sub_type=KEY_SHARED)
    subscription = a.subscription
    subscription.on_flow(a, 3)
    await settle()
    assert side.positions_of("a") == [at(0), at(1), at(2)]
    side.take()
    subscription.on_redeliver(a, None)
    subscription.on_flow(a, 10)
    await settle()
    assert side.take() == [("a", at(i), 1 if i < 3 else 0) for i in range(5)]


def sticky(*ranges: tuple[int, int]) -> KeySharedSettings:
    return KeySharedSettings(mode=KeySharedMode.STICKY, ranges=ranges)


async def test_sticky_ranges_own_their_keys_and_uncovered_keys_wait() -> None:
    keys = [f"key-{i}" for i in range(20)]
    topic = await keyed_topic(keys)
    side = ConsumerSide()
    low = await subscribe(topic, side, "low", sub_type=KEY_SHARED, key_shared=sticky((0, 32767)))
    low.subscription.on_flow(low, 100)
    await settle()
    assert {key_of(keys, p) for p in side.positions_of("low")} == {
        k for k in keys if key_hash(k.encode()) < 32768
    }
    high = await subscribe(
        topic, side, "high", sub_type=KEY_SHARED, key_shared=sticky((32768, 65535))
    )
    high.subscription.on_flow(high, 100)
    await settle()
    assert {key_of(keys, p) for p in side.positions_of("high")} == {
        k for k in keys if key_hash(k.encode()) >= 32768
    }
    assert sorted(p for _, p, _ in side.delivered) == [at(i) for i in range(20)]


async def test_sticky_ranges_that_overlap_or_another_mode_are_refused() -> None:
    topic = await keyed_topic([])
    side = ConsumerSide()
    await subscribe(topic, side, "a", sub_type=KEY_SHARED, key_shared=sticky((0, 99)))
    with pytest.raises(ConsumerAssignError, match=r"^Range conflict with consumer a: \[90, 120\]"):
        await subscribe(topic, side, "b", sub_type=KEY_SHARED, key_shared=sticky((90, 120)))
    with pytest.raises(ConsumerAssignError, match="must not be empty"):
        await subscribe(topic, side, "c", sub_type=KEY_SHARED, key_shared=sticky())
    with pytest.raises(ConsumerAssignError, match="STICKY mode"):
        await subscribe(topic, side, "d", sub_type=KEY_SHARED)
    subscription = topic.subscriptions["sub"]
    assert [c.name for c in subscription.consumers] == ["a"]
    b: Consumer = await subscribe(
        topic, side, "b", sub_type=KEY_SHARED, key_shared=sticky((100, 120))
    )
    assert subscription.consumers == [subscription.consumers[0], b]


def test_auto_split_ranges_cover_every_slot_once_as_select_decides() -> None:
    selector: ConsistentHashSelector[Consumer] = ConsistentHashSelector()
    consumers = [Consumer(ConsumerSide(), i, f"c-{i}", "s") for i in range(3)]
    for consumer in consumers:
        selector.add(consumer, KeySharedSettings())
    owner_of: dict[int, str] = {}
    for consumer in consumers:
        for start, end in selector.ranges_of(consumer):
            for slot in range(start, end + 1):
                assert slot not in owner_of, f"slot {slot} owned twice"
                owner_of[slot] = consumer.name
    assert len(owner_of) == HASH_RANGE_SIZE
    for slot in range(0, HASH_RANGE_SIZE, 97):
        chosen = selector.select(slot)
        assert chosen is not None and owner_of[slot] == chosen.name


async def test_consumer_stats_show_the_key_hash_ranges() -> None:
    topic = await MemoryBroker().topic(TOPIC)
    sticky = KeySharedSettings(KeySharedMode.STICKY, ((0, 99), (200, 299), (100, 150)))
    await subscribe(topic, ConsumerSide(), "c1", sub_type=KEY_SHARED, key_shared=sticky)
    subscriptions = topic.stats()["subscriptions"]
    assert isinstance(subscriptions, dict)
    (stats,) = subscriptions["sub"]["consumers"]
    assert stats["keyHashRanges"] == ["[0, 150]", "[200, 299]"]


class HeldRead:
    """Holds the next call of ``method`` on ``target`` (a cursor's ``read_entries``, a
    ledger's ``read_entry``) until ``release()``: consumers come and go meanwhile. Both
    have slots, so the call is held by a subclass the object is switched to."""

    def __init__(self, target: Any, method: str) -> None:
        self.started = asyncio.Event()
        self.gate = asyncio.Event()
        plain = type(target)
        held_read = self

        async def held(this: Any, *args: Any) -> Any:
            held_read.started.set()
            await held_read.gate.wait()
            this.__class__ = plain
            return await getattr(this, method)(*args)

        target.__class__ = type("Held", (plain,), {"__slots__": (), method: held})

    async def release(self) -> None:
        self.gate.set()
        await settle()


async def owner_and_other(topic: Topic, side: ConsumerSide, key: str) -> tuple[Consumer, Consumer]:
    """Two consumers; the first returned owns ``key``."""
    a = await subscribe(topic, side, "a", sub_type=KEY_SHARED)
    b = await subscribe(topic, side, "b", sub_type=KEY_SHARED)
    owner = a.subscription.consumer_for_key(key.encode())
    assert owner is not None
    return (a, b) if owner is a else (b, a)


async def test_a_read_in_flight_when_the_owner_leaves_goes_after_its_unacked_entries() -> None:
    """The owner of a key leaves while newer entries of the key are being read: what it
    held unacknowledged goes to the next owner first, then the entries just read."""
    topic = await keyed_topic(["k"] * 5)
    side = ConsumerSide()
    owner, other = await owner_and_other(topic, side, "k")
    subscription = owner.subscription
    subscription.on_flow(other, 100)
    subscription.on_flow(owner, 5)
    await settle()
    assert side.take() == [(owner.name, at(i), 0) for i in range(5)]
    held = HeldRead(subscription.cursor, "read_entries")
    await add_keys(topic, ["k"] * 5)
    await asyncio.wait_for(held.started.wait(), 5)
    topic.consumer_closed(owner)
    await held.release()
    assert side.take() == [(other.name, at(i), 1 if i < 5 else 0) for i in range(10)]


async def test_a_redelivery_round_when_the_owner_leaves_keeps_the_keys_order() -> None:
    """The owner of a key leaves while a round is reading the first of the key's entries
    to redeliver to it: none of the later ones overtakes it at the next owner."""
    topic = await keyed_topic(["k"] * 5)
    side = ConsumerSide()
    owner, other = await owner_and_other(topic, side, "k")
    subscription = owner.subscription
    subscription.on_flow(other, 100)
    subscription.on_flow(owner, 5)
    await settle()
    assert len(side.take()) == 5
    subscription.on_redeliver(owner, None)  # no permits left: they wait in the replay set
    await settle()
    held = HeldRead(subscription.ledger, "read_entry")
    subscription.on_flow(owner, 5)
    await asyncio.wait_for(held.started.wait(), 5)
    topic.consumer_closed(owner)
    await held.release()
    assert side.take() == [(other.name, at(i), 1) for i in range(5)]
