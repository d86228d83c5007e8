"""Bundles as Pulsar hashes them, slots, and how brokers name themselves in the group."""

from __future__ import annotations

import zlib
from collections import Counter

from dedup_broker.cluster.bundles import BundleMap, topic_hash
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.domain_base.names import TopicName


def test_four_bundles_split_the_hash_space_evenly() -> None:
    bundles = BundleMap(4, 16)
    assert bundles.boundaries_hex() == [
        "0x00000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]
    assert [b.range for b in bundles.bundles("public/default")] == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]


def test_a_topic_falls_in_the_range_of_its_crc32() -> None:
    bundles = BundleMap(4, 16)
    for i in range(200):
        name = TopicName.parse(f"persistent://public/default/t-{i}")
        value = zlib.crc32(str(name).encode()) & 0xFFFFFFFF
        assert topic_hash(name) == value
        bundle = bundles.bundle_of(name)
        assert bundle.lower <= value < bundle.upper or value == bundle.upper == 0xFFFFFFFF
        assert bundle.contains_topic(name)
        assert bundles.bundle_named("public/default", bundle.range) == bundle


def test_partitions_hash_on_their_own_and_spread_over_slots() -> None:
    bundles = BundleMap(4, 16)
    base = TopicName.parse("persistent://public/default/orders")
    used = {bundles.bundle_of(base.partition(i)) for i in range(32)}
    assert len(used) == 4
    slots = Counter(
        bundles.slot_of_bundle(b) for ns in range(64) for b in bundles.bundles(f"t/ns{ns}")
    )
    assert set(slots) == set(range(16))
    assert bundles.bundle_named("public/default", "0x1_0x2") is None


def test_member_tags_round_trip_and_ignore_strangers() -> None:
    address = BrokerAddress("10.0.0.7", 6651, 8081, "a1b2c3")
    assert BrokerAddress.from_member_tag(address.member_tag()) == address
    assert address.service_url == "pulsar://10.0.0.7:6651"
    assert address.web_url == "http://10.0.0.7:8081"
    assert address.broker_id == "10.0.0.7:8081"
    assert BrokerAddress.from_member_tag("rdkafka") is None
    assert BrokerAddress.from_member_tag("dedup-broker@host|x|8080|i") is None
