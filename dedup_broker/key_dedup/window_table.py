"""One time bucket of a single writer's window: its keys with their anchors' offsets.

Compiled (``_window_table.c``, built by the package's install): one bytearray of 16-byte
slots (open addressing), a group's keys looked up and added in one call each, no Python
object per key. Otherwise a dict: the same answers (tested).

A table grows by placing every key anew, about 15 ns a key, on the event loop: every
topic of the broker waits. Young topics' tables grow several times within seconds, all
at once when their rates are alike, so a table of 1 to 16 MiB grows on a thread of the
compiled helper's own, which never takes the interpreter's lock. Meanwhile its old
array is only read (and takes ``free``'s marks), new keys go to a small array beside
it, and claims look in both; the first use after the thread is done puts the grown
array in their place, the keys beside it merged in.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

from dedup_broker.key_dedup.window import KEY_BYTES

compiled_window: Any
"""The compiled window tables (``_window_table.c``); None without them."""
try:
    compiled_window = importlib.import_module("dedup_broker.key_dedup._window_table")
except ImportError:  # pragma: no cover - depends on the installation
    compiled_window = None

WINDOW_SLOT_BYTES = 16
"""A window table's slot: the key's first 12 bytes, then its anchor's offset from the
table's start plus one (0: empty)."""
WINDOW_MIN_SLOTS = 1024
WINDOW_FILL = 0.75
"""A window table grows before it is fuller than this: 21-32 bytes a key once it grows
by half (``WINDOW_DOUBLING_SLOTS``)."""
WINDOW_DOUBLING_SLOTS = 1 << 20
"""Below this many slots (16 MiB) a table doubles instead: every key is placed again
each time a table grows, at random in a table larger than the processor's caches, so
a young topic's table reaches its size in fewer steps, while a large one's memory
stays within a half more than its keys need."""
WINDOW_BACKGROUND_SLOTS = 1 << 16
"""A table of at least this many slots (1 MiB) grows on a thread of its own, up to
``WINDOW_IN_PLACE_SLOTS``; a smaller one grows inline, in well under a millisecond."""
WINDOW_IN_PLACE_SLOTS = WINDOW_DOUBLING_SLOTS
"""From this many slots (16 MiB) a table grows in place on the event loop (about 15 ns
a key: 180 ms for 12 million): the thread's way holds the old array and the grown one
at once, which a window of tens of millions of keys cannot afford within its memory
bound. A bucket is sized ahead from the one before it, so a table that large grows only
while its topic's rate climbs."""


class _Growth:
    """A table growing on its thread: its old array and what the grown one must learn."""

    __slots__ = ("array", "count", "freed", "frees", "growth")

    def __init__(self, array: bytearray, count: int, freed: int, growth: Any) -> None:
        self.array = array
        self.count = count
        self.freed = freed
        self.growth = growth
        """The compiled helper's handle (``regrow``)."""
        self.frees: list[tuple[bytes, int]] = []
        """Keys freed meanwhile (the thread may have read them as held)."""


class WindowTable:
    """The keys anchored in one time bucket, with their anchors' offsets from its start.
    A key a lost write claimed is freed: held by none."""

    __slots__ = ("_dict", "_growth", "_table", "count", "freed")

    def __init__(self, expected: int, compiled: bool) -> None:
        slots = max(int(expected / WINDOW_FILL) + 1, WINDOW_MIN_SLOTS)
        self._table = bytearray(slots * WINDOW_SLOT_BYTES) if compiled else None
        self._dict: dict[bytes, int] = {}
        self._growth: _Growth | None = None
        self.count = 0
        """Slots with a key, held or freed, in the array taking keys."""
        self.freed = 0
        """Slots whose key a lost write freed (gone when the table grows)."""

    @property
    def held(self) -> int:
        growth = self._growth
        beside = growth.count - growth.freed if growth is not None else 0
        return self.count - self.freed + beside

    @property
    def keys(self) -> int:
        """Slots with a key, held or freed, in all its arrays."""
        growth = self._growth
        return self.count + (growth.count if growth is not None else 0)

    @property
    def nbytes(self) -> int:
        growth = self._growth
        beside = len(growth.array) if growth is not None else 0
        return (len(self._table) if self._table is not None else 0) + beside

    @property
    def arrays(self) -> tuple[Any, ...]:
        """The arrays a claim looks in, the one taking keys last (None: a dict table)."""
        growth = self._growth
        return (growth.array, self._table) if growth is not None else (self._table,)

    @property
    def growing(self) -> bool:
        return self._growth is not None

    def fits(self, more: int) -> bool:
        """Room for ``more`` keys without growing."""
        table = self._table
        return table is None or (self.count + more) * WINDOW_SLOT_BYTES <= len(table) * WINDOW_FILL

    def reserve(self, more: int) -> bool:
        """Room for ``more`` keys not held yet (the table grows by half, or to fit);
        True when its arrays changed (a growth started or ended)."""
        if self._table is None:
            return False
        changed = self.settle()
        table = self._table
        slots = len(table) // WINDOW_SLOT_BYTES
        needed = self.count + more
        if needed <= slots * WINDOW_FILL:
            return changed
        step = slots * 2 if slots < WINDOW_DOUBLING_SLOTS else slots * 3 // 2
        wanted = max(int(needed / WINDOW_FILL) + 1, step)
        if self._growth is None and WINDOW_BACKGROUND_SLOTS <= slots < WINDOW_IN_PLACE_SLOTS:
            growth = compiled_window.regrow(table, wanted)
            self._growth = _Growth(table, self.count, self.freed, growth)
            beside = max(int(more / WINDOW_FILL) + 1, WINDOW_MIN_SLOTS)
            self._table, self.count, self.freed = bytearray(beside * WINDOW_SLOT_BYTES), 0, 0
            return True
        self.count, self.freed = compiled_window.grow(table, wanted), 0
        return changed

    def settle(self) -> bool:
        """A growth its thread finished takes its place, the keys taken beside it
        merged in; True when one did."""
        growth = self._growth
        done = None if growth is None else compiled_window.regrown(growth.growth)
        if done is None:
            return False
        assert growth is not None
        beside, count = self._table, self.count - self.freed
        self._growth = None
        self._table, self.count = done
        self.freed = sum(compiled_window.free(self._table, p, o) for p, o in growth.frees)
        if count:
            self.reserve(count)
            added, reused = compiled_window.merge(self._table, beside)
            self.count += added
            self.freed -= reused
        return True

    def add(self, packed: bytes | memoryview, offset: int) -> bool:
        """Packed 16-byte keys, one offset (a key held with a later one keeps it); True
        when the table's arrays changed."""
        if self._table is None:
            held = self._dict
            for start in range(0, len(packed), KEY_BYTES):
                key = bytes(packed[start : start + KEY_BYTES])
                held[key] = max(offset, held.get(key, offset))
            self.count = len(held)
            return False
        changed = self.reserve(len(packed) // KEY_BYTES)
        added, reused = compiled_window.add(self._table, packed, offset)
        self.count += added
        self.freed -= reused
        return changed

    def find(self, keys: Collection[bytes], minimum: int) -> list[tuple[bytes, int]]:
        """(key, offset) of those of ``keys`` held with an offset of at least ``minimum``."""
        if self._table is None:
            held = self._dict
            return [(k, o) for k in keys if (o := held.get(k, -1)) >= minimum]
        found: list[tuple[bytes, int]] = compiled_window.find(self._table, keys, minimum)
        growth = self._growth
        if growth is None:
            return found
        latest = dict(compiled_window.find(growth.array, keys, minimum))
        for key, offset in found:
            latest[key] = max(offset, latest.get(key, offset))
        return list(latest.items())

    def free(self, packed: bytes, offset: int) -> None:
        """Keys claimed with ``offset`` by a write that was lost: held by none again."""
        if self._table is not None:
            growth = self._growth
            if growth is not None:
                growth.freed += compiled_window.free(growth.array, packed, offset)
                growth.frees.append((bytes(packed), offset))
            self.freed += compiled_window.free(self._table, packed, offset)
            return
        held = self._dict
        for start in range(0, len(packed), KEY_BYTES):
            key = packed[start : start + KEY_BYTES]
            if held.get(key) == offset:
                del held[key]
        self.count = len(held)
