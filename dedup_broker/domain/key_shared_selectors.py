"""Who owns which hash slot of a Key_Shared subscription, as Pulsar's selectors decide it.

* ``ConsistentHashSelector`` (``AUTO_SPLIT`` with ``subscriptionKeySharedUseConsistentHashing``,
  the default): 100 points per consumer on a ring, each at the hash of
  ``name \\0 nameIndex \\0 i`` (Pulsar 4's point keys, so the same consumer names own the
  same keys as on a Pulsar broker); the first point at or after a slot owns it.
* ``RangeSplitSelector`` (``AUTO_SPLIT`` with consistent hashing off, Pulsar's classic
  ``HashRangeAutoSplitStickyKeyConsumerSelector``): the first consumer owns every slot,
  each next one takes the lower half of the largest range.
* ``StickySelector`` (``STICKY``): the ranges each consumer declared.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Generic, Protocol, TypeVar

from dedup_broker.domain.key_hash import HASH_RANGE_SIZE, KeySharedSettings, murmur3_32
from dedup_broker.errors import PermanentError

REPLICA_POINTS = 100
"""Points per consumer on the ring (``subscriptionKeySharedConsistentHashingReplicaPoints``)."""


class ConsumerAssignError(PermanentError):
    """A Key_Shared consumer's hash ranges are invalid or overlap another consumer's."""


class KeyedConsumer(Protocol):
    """What dispatch reads of a consumer (``consumer.Consumer``)."""

    name: str
    permits: int
    key_shared: KeySharedSettings | None


C = TypeVar("C", bound=KeyedConsumer)


def slot_of(key: bytes) -> int:
    """Pulsar's ``makeStickyKeyHash``: Murmur3_32 masked to 31 bits, mod the range."""
    return (murmur3_32(key) & 0x7FFFFFFF) % HASH_RANGE_SIZE


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with adjacent and overlapping ranges joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _owned_ranges(points: list[int], owners: dict[int, C], consumer: C) -> list[tuple[int, int]]:
    """Slots owned through ``points`` (sorted; each owns the slots after the previous
    point up to itself, the first also those after the last point)."""
    owned: list[tuple[int, int]] = []
    previous = points[-1] - HASH_RANGE_SIZE if points else 0
    for point in points:
        if owners[point] is consumer:
            first = previous + 1
            if first >= 0:
                owned.append((first, point))
            else:
                owned.extend([(0, point), (first + HASH_RANGE_SIZE, HASH_RANGE_SIZE - 1)])
        previous = point
    return merge_ranges(owned)


class ConsistentHashSelector(Generic[C]):
    """AUTO_SPLIT on Pulsar's ring: a point taken twice goes to the consumer that came
    last (Pulsar's rule; with 100 points per consumer this is rare and harmless)."""

    def __init__(self, replica_points: int = REPLICA_POINTS) -> None:
        self._replica_points = replica_points
        self._points: list[int] = []
        self._owners: dict[int, C] = {}
        self._name_index: dict[C, int] = {}

    def _point_keys(self, consumer: C, index: int) -> list[int]:
        return [
            slot_of(f"{consumer.name}\0{index}\0{i}".encode()) for i in range(self._replica_points)
        ]

    def add(self, consumer: C, settings: KeySharedSettings) -> None:
        taken = {i for c, i in self._name_index.items() if c.name == consumer.name}
        index = next(i for i in itertools.count() if i not in taken)
        self._name_index[consumer] = index
        for point in self._point_keys(consumer, index):
            if point not in self._owners:
                bisect.insort(self._points, point)
            self._owners[point] = consumer

    def remove(self, consumer: C) -> None:
        index = self._name_index.pop(consumer, None)
        if index is None:
            return
        for point in self._point_keys(consumer, index):
            if self._owners.get(point) is consumer:
                del self._owners[point]
                self._points.remove(point)

    def select(self, slot: int) -> C | None:
        if not self._points:
            return None
        index = bisect.bisect_left(self._points, slot)
        return self._owners[self._points[index % len(self._points)]]

    def ranges_of(self, consumer: C) -> list[tuple[int, int]]:
        """The slots the consumer owns, as inclusive ranges (for consumer stats)."""
        return _owned_ranges(self._points, self._owners, consumer)


class RangeSplitSelector(Generic[C]):
    """AUTO_SPLIT with consistent hashing off: range ends (``HASH_RANGE_SIZE`` for the
    first consumer's) map to their consumers; a joining consumer takes the lower half of
    the largest range; a leaving one's range goes to the consumer below it, or, for the
    top range, the consumer below it moves up to the top."""

    def __init__(self) -> None:
        self._ends: list[int] = []
        self._owners: dict[int, C] = {}

    def add(self, consumer: C, settings: KeySharedSettings) -> None:
        if not self._ends:
            self._put(HASH_RANGE_SIZE, consumer)
            return
        widest_end, widest = HASH_RANGE_SIZE, 0
        for lower, end in zip([0, *self._ends], self._ends, strict=False):
            if end - lower > widest:
                widest_end, widest = end, end - lower
        lower = self._lower(widest_end)
        if widest_end - lower <= 1:
            raise ConsumerAssignError(
                f"No more range can be assigned to a new consumer, assigned consumers "
                f"{len(self._ends)}"
            )
        self._put((widest_end - lower) // 2 + lower, consumer)

    def remove(self, consumer: C) -> None:
        end = next((e for e in self._ends if self._owners[e] is consumer), None)
        if end is None:
            return
        self._drop(end)
        if end == HASH_RANGE_SIZE and self._ends:
            below = self._ends[-1]
            self._put(HASH_RANGE_SIZE, self._owners[below])
            self._drop(below)

    def select(self, slot: int) -> C | None:
        if not self._ends:
            return None
        return self._owners[self._ends[bisect.bisect_left(self._ends, slot)]]

    def ranges_of(self, consumer: C) -> list[tuple[int, int]]:
        owned = []
        for lower, end in zip([-1, *self._ends], self._ends, strict=False):
            if self._owners[end] is consumer:
                owned.append((lower + 1, min(end, HASH_RANGE_SIZE - 1)))
        return merge_ranges(owned)

    def _lower(self, end: int) -> int:
        index = bisect.bisect_left(self._ends, end)
        return self._ends[index - 1] if index > 0 else 0

    def _put(self, end: int, consumer: C) -> None:
        bisect.insort(self._ends, end)
        self._owners[end] = consumer

    def _drop(self, end: int) -> None:
        self._ends.remove(end)
        del self._owners[end]


class StickySelector(Generic[C]):
    """STICKY: consumers own the ranges they declared; the rest of the slots have no owner."""

    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, C]] = []

    def add(self, consumer: C, settings: KeySharedSettings) -> None:
        if not settings.ranges:
            raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
        for start, end in settings.ranges:
            if not 0 <= start <= end < HASH_RANGE_SIZE:
                raise ConsumerAssignError(
                    f"Invalid range [{start}, {end}]: slots lie in 0..{HASH_RANGE_SIZE - 1}"
                )
        declared = sorted(settings.ranges)
        for (_, end), (start, _) in itertools.pairwise(declared):
            if start <= end:
                raise ConsumerAssignError(f"Ranges of consumer {consumer.name} overlap")
        for start, end in declared:
            for taken_start, taken_end, owner in self._ranges:
                if start <= taken_end and taken_start <= end:
                    raise ConsumerAssignError(
                        f"Range conflict with consumer {owner.name}: "
                        f"[{start}, {end}] overlaps [{taken_start}, {taken_end}]"
                    )
        for start, end in declared:
            bisect.insort(self._ranges, (start, end, consumer), key=lambda r: r[0])

    def remove(self, consumer: C) -> None:
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def ranges_of(self, consumer: C) -> list[tuple[int, int]]:
        return merge_ranges(
            [(start, end) for start, end, owner in self._ranges if owner is consumer]
        )

    def select(self, slot: int) -> C | None:
        index = bisect.bisect_right(self._ranges, slot, key=lambda r: r[0]) - 1
        if index >= 0:
            start, end, consumer = self._ranges[index]
            if start <= slot <= end:
                return consumer
        return None


Selector = ConsistentHashSelector[C] | RangeSplitSelector[C] | StickySelector[C]
