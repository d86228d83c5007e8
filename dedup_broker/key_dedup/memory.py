"""The broker's own memory of a scope's keys, with no I/O: the single writer's exact
window, the local cache of recently stored keys (two generations of compact key tables)
that scopes with several writers keep, and the keys of writes still in flight.

The compiled helpers (``window.compiled_keys`` and ``_window_table``, built by the
package's install) do the per-key work of the tables; each has a pure-Python path with
the same answers. A window's tables, and how a large one grows off the event loop:
``window_table.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from itertools import repeat
from typing import Any, NamedTuple, Protocol

from dedup_broker.key_dedup import window
from dedup_broker.key_dedup.window import KEY_BYTES, now_ms
from dedup_broker.key_dedup.window_table import WindowTable, compiled_window


class KeyMemory(Protocol):
    """What a scope's memory of stored keys answers (``WindowKeys``, ``LocalKeyCache``)."""

    hits: int

    def __len__(self) -> int: ...

    def add(self, key: bytes, anchor_ms: int) -> None: ...

    def add_all(self, keys: Iterable[bytes], anchor_ms: int) -> None: ...

    def known(self, keys: set[bytes]) -> set[bytes]: ...

    def stored(self, key: bytes, now_ms: int, window_ms: int) -> bool: ...


# --- the single writer's exact window ------------------------------------------------
_NEVER = 2**63


def _claim_python(
    tables: list[WindowTable], minimums: list[int], target: int, packed: bytes, offset: int
) -> list[tuple[int, int, int]]:
    """``compiled_window.claim`` on dict tables: the same answers."""
    found: list[tuple[int, int, int]] = []
    dicts = [t._dict for t in tables]
    into = dicts[target]
    for index in range(len(packed) // KEY_BYTES):
        key = packed[index * KEY_BYTES : (index + 1) * KEY_BYTES]
        for number, (held, minimum) in enumerate(zip(dicts, minimums, strict=True)):
            value = held.get(key, -1)
            if value >= minimum:
                found.append((index, number, value))
                break
        else:
            into[key] = offset
    tables[target].count = len(into)
    return found


class HeldKey(NamedTuple):
    """A key a claim found held already."""

    position: int
    """Its position among the claimed keys."""
    anchor: int
    """The anchor it is held under."""


class WindowKeys:
    """Every key a single-writer scope stored whose window may last, with its anchor:
    exact (nothing forgotten, no false positive), so the writer's memory decides alone.

    Keys go into tables by time bucket of their anchors (publish times), half a window
    each; a bucket is dropped whole once its end plus the window has passed. A bucket's
    table starts sized for what the one before it got (the rate keys come at), 16 bytes
    a slot at most three quarters full.
    """

    def __init__(self, window_ms: int, compiled: bool | None = None) -> None:
        self.window_ms = window_ms
        self.bucket_ms = max(window_ms // 2, 1)
        self._compiled = compiled_window is not None if compiled is None else compiled
        self._buckets: dict[int, WindowTable] = {}
        self._numbers: tuple[int, ...] = ()
        self._tables: tuple[Any, ...] = ()
        """The buckets' arrays (two for a bucket whose table grows on its thread) and
        their buckets' numbers, in the same order (kept with the buckets, so a claim
        builds no sequence of them)."""
        self._targets: dict[int, int] = {}
        """A bucket's number: the position of the array taking its keys."""
        self._expires_at = _NEVER
        self._growing = False
        """A bucket's table grows on its thread: each claim asks whether it is done."""
        self.hits = 0

    def _buckets_changed(self) -> None:
        buckets, size, window = self._buckets, self.bucket_ms, self.window_ms
        numbers: list[int] = []
        tables: list[Any] = []
        targets: dict[int, int] = {}
        for number, table in buckets.items():
            arrays = table.arrays
            numbers.extend(repeat(number, len(arrays)))
            tables.extend(arrays)
            targets[number] = len(tables) - 1
        self._numbers, self._tables, self._targets = tuple(numbers), tuple(tables), targets
        self._growing = any(t.growing for t in buckets.values())
        self._expires_at = min(((n + 1) * size + window for n in buckets), default=_NEVER)

    def __len__(self) -> int:
        return sum(t.held for t in self._buckets.values())

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._buckets.values())

    def expire(self, now: int) -> None:
        if now < self._expires_at:
            return
        size, window = self.bucket_ms, self.window_ms
        for number in [n for n in self._buckets if (n + 1) * size + window <= now]:
            del self._buckets[number]
        self._buckets_changed()

    def add(self, key: bytes, anchor_ms: int) -> None:
        self.add_packed(key, anchor_ms)

    def add_all(self, keys: Iterable[bytes], anchor_ms: int) -> None:
        """Keys of one stored entry (one anchor)."""
        self.add_packed(b"".join(keys), anchor_ms)

    def add_packed(self, packed: bytes | memoryview, anchor_ms: int) -> None:
        """Packed 16-byte keys with one anchor (as Redis's copy holds them)."""
        if len(packed) % KEY_BYTES:
            raise ValueError("packed keys are a multiple of 16 bytes")
        anchor = max(anchor_ms, 0)
        now = now_ms()
        if not packed or anchor + self.window_ms <= now:
            return  # the window of these keys has passed
        self.expire(now)
        number = anchor // self.bucket_ms
        if self._bucket(number).add(packed, anchor - number * self.bucket_ms):
            self._buckets_changed()

    def _bucket(self, number: int) -> WindowTable:
        table = self._buckets.get(number)
        if table is None:
            before = self._buckets.get(number - 1)
            table = WindowTable(before.keys if before else 0, self._compiled)
            self._buckets[number] = table
            self._buckets_changed()
        return table

    def claim(self, packed: bytes, anchor_ms: int) -> tuple[int, list[HeldKey]]:
        """A write's keys (packed) looked up and, those held nowhere, added (``free``
        takes them back if the write is lost): one pass for the lookup and the claim, no
        object made per key. Answers the anchor memory keeps them under (a publish time
        whose window has passed already counts from now) and the keys held already: by a
        stored write, one in flight, or an earlier key of ``packed``."""
        now = now_ms()
        if now >= self._expires_at:
            self.expire(now)
        window, size = self.window_ms, self.bucket_ms
        anchor = max(anchor_ms, now - window + 1)
        number = anchor // size
        target = self._buckets.get(number)
        more = len(packed) // KEY_BYTES
        if target is None or self._growing or not target.fits(more):
            target = self._ready_for(number, more)
        numbers, oldest = self._numbers, now - window + 1
        minimums = tuple([max(oldest - n * size, 0) for n in numbers])
        at, offset = self._targets[number], anchor - number * size
        if self._compiled:
            added, reused, found = compiled_window.claim(self._tables, minimums, at, packed, offset)
            target.count += added
            target.freed -= reused
        else:
            tables = [self._buckets[n] for n in numbers]
            found = _claim_python(tables, list(minimums), at, packed, offset)
        if not found:
            return anchor, []
        return anchor, [HeldKey(i, numbers[t] * size + o) for i, t, o in found]

    def _ready_for(self, number: int, more: int) -> WindowTable:
        """Bucket ``number``'s table made, with room for ``more`` keys; growths that
        finished take their places."""
        target = self._bucket(number)
        changed = False
        for table in self._buckets.values():
            changed |= table.settle()
        if target.reserve(more) or changed:
            self._buckets_changed()
        return target

    def free(self, packed: bytes, anchor: int) -> None:
        """The keys ``claim`` took under ``anchor`` for a write that was lost: new again."""
        number = anchor // self.bucket_ms
        table = self._buckets.get(number)
        if table is not None:
            table.free(packed, anchor - number * self.bucket_ms)

    def anchors(self, keys: Collection[bytes], now: int) -> dict[bytes, int]:
        """Those of ``keys`` stored inside their window at ``now``, with their anchors."""
        self.expire(now)
        found: dict[bytes, int] = {}
        for number, table in self._buckets.items():
            start = number * self.bucket_ms
            for key, offset in table.find(keys, max(now - self.window_ms - start + 1, 0)):
                found[key] = max(start + offset, found.get(key, 0))
        return found

    def known(self, keys: set[bytes]) -> set[bytes]:
        return set(self.anchors(keys, now_ms()))

    def stored(self, key: bytes, now_ms: int, window_ms: int) -> bool:
        if not self.anchors((key,), now_ms):
            return False
        self.hits += 1
        return True

    def clear(self) -> None:
        self._buckets.clear()
        self._buckets_changed()


# --- the broker's own memory of keys ---------------------------------------------------
TABLE_SLOT_BYTES = 24
"""A key table's slot: the 16-byte key, then its anchor plus one (little-endian; 0: empty)."""
_TABLE_MIN_SLOTS = 1024
_ANCHOR_MAX = 2**63 - 2


class KeyTable:
    """16-byte keys with their anchors (the latest given wins), as one generation of the
    local cache holds them.

    Compiled (``table_*`` in ``_batch_keys.c``): an open-addressing table in one
    bytearray, 24 bytes a key, kept at most half full; a group's keys are looked up and
    added in one call each, with no Python object per key stored. Otherwise a dict: the
    same answers (tested). An anchor outside 0..2**63-2 is clamped into it.
    """

    __slots__ = ("_count", "_dict", "_table")

    def __init__(self, compiled: bool | None = None, like: KeyTable | None = None) -> None:
        """``like``: as many slots as that table has (the next generation of a cache)."""
        if compiled is None:  # a helper built before the tables existed lacks them
            compiled = hasattr(window.compiled_keys, "table_add")
        slots = like.slots if like is not None else _TABLE_MIN_SLOTS
        self._table: bytearray | None = (
            bytearray(max(slots, _TABLE_MIN_SLOTS) * TABLE_SLOT_BYTES) if compiled else None
        )
        self._dict: dict[bytes, int] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count if self._table is not None else len(self._dict)

    @property
    def slots(self) -> int:
        """Slots of the compiled table (0 on the dict path)."""
        return len(self._table) // TABLE_SLOT_BYTES if self._table is not None else 0

    def add(self, keys: list[bytes] | tuple[bytes, ...] | set[bytes], anchor: int) -> None:
        anchor = min(max(anchor, 0), _ANCHOR_MAX)
        table = self._table
        if table is None:
            self._dict.update(zip(keys, repeat(anchor)))
            return
        slots = len(table) // TABLE_SLOT_BYTES
        needed = self._count + len(keys)
        if needed * 2 > slots:
            while needed * 2 > slots:
                slots *= 2
            grown = bytearray(slots * TABLE_SLOT_BYTES)
            window.compiled_keys.table_move(table, grown)
            self._table = table = grown
        self._count += window.compiled_keys.table_add(table, keys, anchor)

    def found(self, keys: set[bytes]) -> set[bytes]:
        """Those of ``keys`` held here."""
        if self._table is None:
            return self._dict.keys() & keys
        if not self._count:
            return set()
        return set(window.compiled_keys.table_find(self._table, keys, False))

    def get(self, key: bytes) -> int | None:
        if self._table is None:
            return self._dict.get(key)
        if not self._count:
            return None
        anchor: int | None = window.compiled_keys.table_get(self._table, key)
        return anchor

    def discard(self, key: bytes) -> None:
        if self._table is None:
            self._dict.pop(key, None)
        elif self._count and window.compiled_keys.table_remove(self._table, key):
            self._count -= 1

    def keys(self) -> list[bytes]:
        if self._table is None:
            return list(self._dict)
        keys: list[bytes] = window.compiled_keys.table_keys(self._table) if self._count else []
        return keys


class LocalKeyCache:
    """Recently stored keys with their anchors (publish times), in two generations.

    Only keys of stored messages enter it, so a hit is always a true repeat while the
    window lasts: most repeats are answered without asking Redis. New keys go to the
    young generation; once it holds half the capacity it becomes the old one and the
    old one is forgotten whole: a stored entry's keys enter with one call, with no
    bookkeeping per key (a key stored again young keeps its latest anchor). Each
    generation is a ``KeyTable`` (compiled where built; ``compiled=False``: the dict path).
    """

    def __init__(self, capacity: int, compiled: bool | None = None) -> None:
        self.capacity = capacity
        self._half = max(capacity // 2, 1)
        self._compiled = compiled
        self._young = KeyTable(compiled)
        self._old = KeyTable(compiled)
        self.hits = 0

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def add(self, key: bytes, anchor_ms: int) -> None:
        self.add_all((key,), anchor_ms)

    def add_all(self, keys: Iterable[bytes], anchor_ms: int) -> None:
        """Keys of one stored entry (one anchor)."""
        if self.capacity <= 0:
            return
        young = self._young
        young.add(keys if isinstance(keys, list | tuple | set) else list(keys), anchor_ms)
        if len(young) >= self._half:
            self._old, self._young = young, KeyTable(self._compiled, like=young)

    def known(self, keys: set[bytes]) -> set[bytes]:
        """Those of ``keys`` held here (whatever their anchors)."""
        found = self._young.found(keys)
        if len(self._old):
            found |= self._old.found(keys)
        return found

    def stored(self, key: bytes, now_ms: int, window_ms: int) -> bool:
        anchor = self._young.get(key)
        if anchor is None:
            anchor = self._old.get(key)
            if anchor is None:
                return False
        if anchor + window_ms <= now_ms:
            self._young.discard(key)
            self._old.discard(key)
            return False
        self.hits += 1
        return True

    def clear(self) -> None:
        """Forgets every key."""
        self._young, self._old = KeyTable(self._compiled), KeyTable(self._compiled)


class InFlightKeys:
    """Keys claimed by writes of this broker not settled yet; each with its outcome.

    The future resolves to True when the write was stored (the key is then remembered),
    False when it certainly was not (the key is free again). It is made when first asked
    for: most keys are never awaited (only a repeat arriving while the write is in
    flight waits), and a future per claimed key was a tenth of the broker's CPU under a
    load of new keys.
    """

    def __init__(self) -> None:
        self._keys: dict[bytes, asyncio.Future[bool] | None] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: bytes) -> bool:
        return key in self._keys

    def get(self, key: bytes) -> asyncio.Future[bool] | None:
        """The outcome of the write holding ``key``; None when no write holds it."""
        known = self._keys
        if key not in known:
            return None
        future = known[key]
        if future is None:
            future = known[key] = asyncio.get_running_loop().create_future()
        return future

    def held(self, keys: set[bytes]) -> set[bytes]:
        """Those of ``keys`` a write of this broker holds."""
        return self._keys.keys() & keys

    def none_held(self, keys: set[bytes]) -> bool:
        """True when no write of this broker holds any of ``keys``."""
        return self._keys.keys().isdisjoint(keys)

    def claim_new(self, keys: Iterable[bytes]) -> None:
        """Marks each of ``keys``, none of them held (the caller checked, with no await
        since), held by a write of this broker: one update, no check per key."""
        self._keys.update(zip(keys, repeat(None)))

    def claim_all(self, keys: Iterable[bytes]) -> None:
        """Marks each of ``keys`` held by a write of this broker (outcomes via ``get``);
        a key held already keeps its write's outcome."""
        known = self._keys
        fresh = dict.fromkeys(keys)
        if known:
            for key in fresh.keys() & known.keys():
                del fresh[key]
        known.update(fresh)

    def settle(self, key: bytes, stored: bool) -> None:
        self.settle_all((key,), stored)

    def settle_all(self, keys: Iterable[bytes], stored: bool) -> None:
        # Most keys have no future (nobody waited): popped by map, only futures looped over.
        for future in filter(None, map(self._keys.pop, keys, repeat(None))):
            if not future.done():
                future.set_result(stored)

    def keys(self) -> list[bytes]:
        return list(self._keys)
