"""Namespace bundles as Pulsar hashes them, and the ownership slot of each bundle.

A namespace's hash space ``[0x00000000, 0xffffffff]`` is split into
``defaultNumberOfNamespaceBundles`` equal ranges; a topic belongs to the range holding the
CRC-32 of its full name (each partition of a partitioned topic on its own, as in Pulsar).
Bundles map onto a fixed number of ownership slots: the partitions of the ownership
topic that the brokers' consumer group shares out.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from dedup_broker.domain_base.names import TopicName

FULL_RANGE = 0x1_0000_0000
LAST_HASH = 0xFFFF_FFFF


def topic_hash(name: TopicName) -> int:
    """Pulsar's bundle hash: CRC-32 of ``persistent://tenant/ns/topic``."""
    return zlib.crc32(str(name).encode("utf-8")) & LAST_HASH


def boundaries(number_of_bundles: int) -> list[int]:
    """The ``number_of_bundles + 1`` boundaries of equal ranges over the hash space."""
    step = FULL_RANGE // number_of_bundles
    return [step * index for index in range(number_of_bundles)] + [LAST_HASH]


@dataclass(frozen=True, slots=True)
class Bundle:
    namespace: str
    lower: int
    upper: int

    @property
    def range(self) -> str:
        """Pulsar's spelling, e.g. ``0x40000000_0x80000000``."""
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range}"

    def contains_topic(self, name: TopicName) -> bool:
        return self.contains(topic_hash(name))

    def contains(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper or (
            self.upper == LAST_HASH and hash_value == LAST_HASH
        )


class BundleMap:
    """Topics to bundles to slots, for one cluster's settings."""

    def __init__(self, number_of_bundles: int, slots: int) -> None:
        self.number_of_bundles = number_of_bundles
        self.slots = slots
        self._boundaries = boundaries(number_of_bundles)

    def bundles(self, namespace: str) -> list[Bundle]:
        edges = self._boundaries
        return [Bundle(namespace, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]

    def boundaries_hex(self) -> list[str]:
        return [f"0x{edge:08x}" for edge in self._boundaries]

    def bundle_of(self, name: TopicName) -> Bundle:
        value = topic_hash(name)
        step = FULL_RANGE // self.number_of_bundles
        index = min(value // step, self.number_of_bundles - 1)
        edges = self._boundaries
        return Bundle(name.namespace_name, edges[index], edges[index + 1])

    def bundle_named(self, namespace: str, bundle_range: str) -> Bundle | None:
        """The bundle ``0xLOWER_0xUPPER`` of ``namespace``, if it is one of its ranges."""
        for bundle in self.bundles(namespace):
            if bundle.range == bundle_range.lower():
                return bundle
        return None

    def slot_of_bundle(self, bundle: Bundle) -> int:
        return zlib.crc32(str(bundle).encode("utf-8")) % self.slots

    def slot_of(self, name: TopicName) -> int:
        return self.slot_of_bundle(self.bundle_of(name))
