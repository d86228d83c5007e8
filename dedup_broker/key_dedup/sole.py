"""A single writer's decisions: a scope one fenced owner writes (a topic that is not
partitioned) decides every key from its own memory of the window, with no I/O.

Each SEND's keys are claimed in one pass over the window's tables (``WindowKeys.claim``):
the keys held nowhere go in, and the pass names the keys held already. Under a load of
new keys it names none and the SEND is appended whole, with no object made and no step
taken per key in Python. When Kafka answers, a stored write's keys stay (and go to
Redis's copy); a lost write's keys are freed.

A repeat of a key a write in flight holds is dropped on the condition that write is
stored: its answer waits for that write's outcome. That write is found among the writes
in flight by the anchor the table holds the key under (a key held under an anchor no
write in flight has, or that none of them holds, was stored).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dedup_broker.key_dedup.window import KEY_BYTES, PackedKeys

if TYPE_CHECKING:
    from dedup_broker.key_dedup.memory import WindowKeys
    from dedup_broker.storage.api import Position


@dataclass(eq=False, slots=True)
class HeldWrite:
    """The keys one appended entry claimed, until Kafka answers."""

    packed: bytes
    anchor: int
    """The anchor memory holds them under."""
    outcome: asyncio.Future[bool] | None = None
    """Made only when a repeat waits for this write: True when it was stored."""
    count: int = field(init=False)

    def __post_init__(self) -> None:
        self.count = len(self.packed) // KEY_BYTES

    def holds(self, key: bytes) -> bool:
        packed = self.packed
        at = packed.find(key)
        while at >= 0 and at % KEY_BYTES:
            at = packed.find(key, at + 1)
        return at >= 0


@dataclass(slots=True)
class SoleSorting:
    """What stays of one SEND: ``keep`` (a flag per message; None: all of them), the
    write's claimed keys (None: no key claimed), the writes its answer waits for."""

    keep: list[bool] | None
    write: HeldWrite | None
    after: list[asyncio.Future[bool]] = field(default_factory=list)
    dropped: int = 0
    unchecked: int = 0


class SoleWrites:
    """A single writer's writes in flight, by the anchor their keys are held under."""

    def __init__(self, window: WindowKeys) -> None:
        self.window = window
        self._flying: dict[int, list[HeldWrite]] = {}
        self.keys = 0
        """Keys held by writes in flight."""

    def sort(self, keys: PackedKeys, anchor_ms: int) -> SoleSorting:
        """Claims a SEND's keys (those of its messages that have one, packed) and sorts
        its messages: a key held already is a repeat; a message without one is kept
        unchecked."""
        packed, missing, count = keys
        unchecked = len(missing)
        anchor, found = self.window.claim(packed, anchor_ms)
        if not found:
            write = HeldWrite(packed, anchor) if packed else None
            return SoleSorting(None, write, unchecked=unchecked)
        repeats = sorted({held.position for held in found})
        after: dict[int, asyncio.Future[bool]] = {}
        for held in found:
            start = held.position * KEY_BYTES
            holder = self._holder(packed[start : start + KEY_BYTES], held.anchor)
            if holder is not None:  # else stored, or an earlier message of this SEND has it
                after.setdefault(id(holder), self.outcome(holder))
        kept = bytearray(packed)
        for index in reversed(repeats):
            del kept[index * KEY_BYTES : (index + 1) * KEY_BYTES]
        keep = [True] * count
        if missing:
            without = set(missing)
            positions = [i for i in range(count) if i not in without]
            for index in repeats:
                keep[positions[index]] = False
        else:
            for index in repeats:
                keep[index] = False
        return SoleSorting(
            keep,
            HeldWrite(bytes(kept), anchor) if kept else None,
            list(after.values()),
            len(repeats),
            unchecked,
        )

    def _holder(self, key: bytes, anchor: int) -> HeldWrite | None:
        for write in self._flying.get(anchor, ()):
            if write.holds(key):
                return write
        return None

    def outcome(self, write: HeldWrite) -> asyncio.Future[bool]:
        if write.outcome is None:
            write.outcome = asyncio.get_running_loop().create_future()
        return write.outcome

    def flying(self, write: HeldWrite) -> None:
        """``write`` was appended: its keys stay in flight until ``settle``."""
        self._flying.setdefault(write.anchor, []).append(write)
        self.keys += write.count

    def settle(self, write: HeldWrite, stored: bool) -> None:
        """Kafka's answer (or certainty that it was lost): the keys stay, or are freed."""
        if not stored:
            self.window.free(write.packed, write.anchor)
        same = self._flying.get(write.anchor)
        if same is not None and write in same:
            same.remove(write)
            self.keys -= write.count
            if not same:
                del self._flying[write.anchor]
        if write.outcome is not None and not write.outcome.done():
            write.outcome.set_result(stored)


def settle_landed(
    writes: SoleWrites, failed: list[HeldWrite], landed: dict[bytes, tuple[int, Position]]
) -> list[tuple[HeldWrite, int, Position]]:
    """After a failed write: the writes whose entry landed are stored, the others freed.
    Answers the stored ones with their entry's publish time and position."""
    stored: list[tuple[HeldWrite, int, Position]] = []
    for write in failed:
        first = write.packed[:KEY_BYTES]
        if first in landed:
            stored.append((write, *landed[first]))
        writes.settle(write, first in landed)
    return stored
