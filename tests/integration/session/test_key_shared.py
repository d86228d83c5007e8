"""Key_Shared subscriptions with the official client: one consumer per key, order per
key, keys handed over when a consumer closes, STICKY ranges, ordering key first."""

from __future__ import annotations

import time

import pulsar
import pytest

from dedup_broker.domain.key_hash import key_hash

KEYS, PER_KEY = 30, 20
RECEIVE_MS = 200
IDLE_SECONDS = 10.0

Received = list[tuple[str, int]]
"""(key, sequence within the key) in the order a consumer received them."""


def key_shared(
    client: pulsar.Client,
    topic: str,
    name: str,
    policy: pulsar.ConsumerKeySharedPolicy | None = None,
) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "ks",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name=name,
        receiver_queue_size=50,
        key_shared_policy=policy,
    )


def sticky(*ranges: tuple[int, int]) -> pulsar.ConsumerKeySharedPolicy:
    return pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=list(ranges)
    )


def produce(producer: pulsar.Producer) -> None:
    """PER_KEY rounds over KEYS keys, payload ``key/sequence``."""
    for seq in range(PER_KEY):
        for k in range(KEYS):
            key = f"key-{k}"
            producer.send_async(f"{key}/{seq}".encode(), None, partition_key=key)
    producer.flush()


def receive_all(
    consumers: dict[str, pulsar.Consumer],
    received: dict[str, Received],
    total: int,
    stop_after: tuple[str, int] | None = None,
) -> None:
    """Receive and acknowledge round-robin until ``total`` messages arrived or nothing
    came for a while (or ``stop_after[0]`` received ``stop_after[1]``)."""
    idle_since = time.monotonic()
    while sum(len(r) for r in received.values()) < total:
        for name, consumer in consumers.items():
            try:
                msg = consumer.receive(RECEIVE_MS)
            except pulsar.Timeout:
                continue
            key, seq = msg.data().decode().split("/")
            received[name].append((key, int(seq)))
            consumer.acknowledge(msg)
            idle_since = time.monotonic()
            if stop_after and stop_after[0] == name and len(received[name]) >= stop_after[1]:
                return
        if time.monotonic() - idle_since > IDLE_SECONDS:
            return


def keys_of(received: Received) -> set[str]:
    return {key for key, _ in received}


def assert_in_order_per_key(received: Received) -> None:
    last: dict[str, int] = {}
    for key, seq in received:
        assert seq > last.get(key, -1), f"{key}/{seq} came after {key}/{last[key]}"
        last[key] = seq


def everything() -> list[tuple[str, int]]:
    return sorted((f"key-{k}", seq) for k in range(KEYS) for seq in range(PER_KEY))


def test_auto_split_gives_each_key_to_one_consumer_in_order(
    client: pulsar.Client, topic: str
) -> None:
    consumers = {name: key_shared(client, topic, name) for name in ("c1", "c2", "c3")}
    producer = client.create_producer(
        topic, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased
    )
    produce(producer)
    received: dict[str, Received] = {name: [] for name in consumers}
    receive_all(consumers, received, KEYS * PER_KEY)
    assert sorted(m for r in received.values() for m in r) == everything()
    for name, messages in received.items():
        assert messages, f"{name} got no key"
        assert_in_order_per_key(messages)
    owners = [keys_of(r) for r in received.values()]
    assert sum(len(keys) for keys in owners) == KEYS  # each key on exactly one consumer


def test_a_closing_consumer_hands_its_keys_over_in_order(client: pulsar.Client, topic: str) -> None:
    consumers = {name: key_shared(client, topic, name) for name in ("c1", "c2", "c3")}
    producer = client.create_producer(topic, batching_enabled=False)
    produce(producer)
    received: dict[str, Received] = {name: [] for name in consumers}
    receive_all(consumers, received, KEYS * PER_KEY, stop_after=("c3", 40))
    assert len(received["c3"]) == 40
    consumers.pop("c3").close()
    left = received.pop("c3")
    receive_all(consumers, received, KEYS * PER_KEY - len(left))
    # Nothing is lost; what c3 received but had not acknowledged when it closed may come
    # again, to the consumer its key moved to, before that key's newer messages.
    got = [m for r in received.values() for m in r]
    assert set(got) | set(left) == set(everything())
    assert len(got) == len(set(got))
    for messages in received.values():
        assert_in_order_per_key(messages)
    for key in keys_of(left):
        takers = [name for name, r in received.items() if key in keys_of(r)]
        assert len(takers) == 1
        newer = [seq for k, seq in received[takers[0]] if k == key]
        assert newer == list(range(newer[0], PER_KEY))
        assert newer[0] <= max(seq for k, seq in left if k == key) + 1


def test_sticky_ranges_decide_the_consumer_and_overlaps_are_refused(
    client: pulsar.Client, topic: str
) -> None:
    consumers = {
        "low": key_shared(client, topic, "low", sticky((0, 32767))),
        "high": key_shared(client, topic, "high", sticky((32768, 65535))),
    }
    with pytest.raises(pulsar.ConsumerAssignError):
        key_shared(client, topic, "overlapping", sticky((30000, 40000)))
    producer = client.create_producer(topic, batching_enabled=False)
    produce(producer)
    received: dict[str, Received] = {name: [] for name in consumers}
    receive_all(consumers, received, KEYS * PER_KEY)
    assert sorted(received["low"] + received["high"]) == everything()
    low = {f"key-{k}" for k in range(KEYS) if key_hash(f"key-{k}".encode()) <= 32767}
    assert keys_of(received["low"]) == low
    assert keys_of(received["high"]) == {f"key-{k}" for k in range(KEYS)} - low
    for messages in received.values():
        assert_in_order_per_key(messages)


def test_the_ordering_key_takes_precedence_over_the_partition_key(
    client: pulsar.Client, topic: str
) -> None:
    consumers = {
        "low": key_shared(client, topic, "low", sticky((0, 32767))),
        "high": key_shared(client, topic, "high", sticky((32768, 65535))),
    }
    names = [f"k{i}" for i in range(100)]
    low = next(n for n in names if key_hash(n.encode()) <= 32767)
    high = next(n for n in names if key_hash(n.encode()) > 32767)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"ordering-low/0", partition_key=high, ordering_key=low)
    producer.send(b"ordering-high/0", partition_key=low, ordering_key=high)
    producer.send(b"partition-low/0", partition_key=low)
    producer.send(b"partition-high/0", partition_key=high)
    received: dict[str, Received] = {name: [] for name in consumers}
    receive_all(consumers, received, 4)
    assert received == {
        "low": [("ordering-low", 0), ("partition-low", 0)],
        "high": [("ordering-high", 0), ("partition-high", 0)],
    }
