"""The broker's own memory of a scope's keys, with no I/O: the local cache of recently
stored keys (two generations of compact key tables), the Bloom filters of the keys it
forgot to make room, and the keys of writes still in flight.

The compiled helper (``window.compiled_keys``, built by the package's install) does
the per-key work of the tables and filters; each has a pure-Python path with the same
answers.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterable
from itertools import compress, repeat

from dedup_broker.key_dedup import window
from dedup_broker.key_dedup.window import KEY_BYTES, now_ms

# --- Bloom filters of keys ----------------------------------------------------------
BLOOM_BLOCK_BYTES = 64
"""A key's bits all fall in one 64-byte block (one cache line): one memory access per
filter tested."""
BLOOM_HASHES = 7
BLOOM_BITS_PER_KEY = 12
"""With 7 bits set per key, about 0.4% false positives in a filter holding its capacity
(1.5 bytes per key); a key is tested against two or three filters, about 1% in all."""


def _bloom_spots(bits: bytes | bytearray, keys: list[bytes]) -> Iterable[tuple[int, int]]:
    """Per key: its block's offset in ``bits`` and its 63 bits of bit positions, as the
    compiled ``bloom_add``/``bloom_test`` compute them (first 8 bytes of the key, read
    little-endian, choose the block; the last 8 give seven 9-bit positions in it)."""
    blocks = len(bits) // BLOOM_BLOCK_BYTES
    if len(bits) % BLOOM_BLOCK_BYTES or not 0 < blocks <= 0xFFFFFFFF:
        raise ValueError("a Bloom filter is 1 to 2**32 blocks of 64 bytes")
    for key in keys:
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise ValueError("Bloom filter keys are 16-byte bytes")
        block = ((int.from_bytes(key[:8], "little") >> 32) * blocks) >> 32
        yield block * BLOOM_BLOCK_BYTES, int.from_bytes(key[8:], "little")


def bloom_add_python(bits: bytearray, keys: list[bytes]) -> None:
    """Sets each key's bits (the pure-Python path of the compiled ``bloom_add``)."""
    for base, spread in _bloom_spots(bits, keys):
        for i in range(BLOOM_HASHES):
            bit = (spread >> (9 * i)) & 511
            bits[base + (bit >> 3)] |= 1 << (bit & 7)


def bloom_test_python(bits: bytes | bytearray, keys: list[bytes]) -> list[bool]:
    """Per key: True when all its bits are set (the filter may hold it)."""
    out: list[bool] = []
    for base, spread in _bloom_spots(bits, keys):
        hit = True
        for i in range(BLOOM_HASHES):
            bit = (spread >> (9 * i)) & 511
            if not (bits[base + (bit >> 3)] >> (bit & 7)) & 1:
                hit = False
                break
        out.append(hit)
    return out


def bloom_add(bits: bytearray, keys: list[bytes]) -> None:
    if window.compiled_keys is not None:
        window.compiled_keys.bloom_add(bits, keys)
    else:  # pragma: no cover - depends on the installation
        bloom_add_python(bits, keys)


def bloom_test(bits: bytearray, keys: list[bytes]) -> list[bool]:
    if window.compiled_keys is not None:
        found: list[bool] = window.compiled_keys.bloom_test(bits, keys)
        return found
    return bloom_test_python(bits, keys)  # pragma: no cover - depends on the installation


class BloomFilter:
    """A Bloom filter sized for ``capacity`` keys (about 0.4% false positives when full)."""

    __slots__ = ("bits", "capacity", "count")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(capacity, 1)
        bits = self.capacity * BLOOM_BITS_PER_KEY
        blocks = -(-bits // (BLOOM_BLOCK_BYTES * 8))
        self.bits = bytearray(blocks * BLOOM_BLOCK_BYTES)
        self.count = 0

    def add(self, keys: list[bytes]) -> None:
        bloom_add(self.bits, keys)
        self.count += len(keys)

    def test(self, keys: list[bytes]) -> list[bool]:
        return bloom_test(self.bits, keys)


class ForgottenKeys:
    """Keys the local cache forgot to make room, while their window may last: Bloom
    filters in time buckets of their anchors, half a window each.

    A key none of the filters holds was not forgotten (inside its window): the single
    writer knows it is new without asking Redis. A hit, true or false (about 0.4% per
    full filter, two or three filters live), is asked of Redis. A bucket is dropped
    whole once no window reaches it: its keys' anchors are at most its end. A bucket's
    filter is sized for the keys it will get: the rate keys were forgotten at lately
    times what is left of the bucket, with a quarter to spare (at most 16 times what
    this or the previous bucket got); a bucket that gets more adds another filter, at
    least as large as the bucket so far.
    """

    HEADROOM = 1.25
    GROWTH = 16

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.bucket_ms = max(window_ms // 2, 1)
        self._buckets: dict[int, list[BloomFilter]] = {}
        self._rate = 0.0
        """Keys forgotten per ms, lately (0: not known yet)."""
        self._last_add_ms = 0
        self.hits = 0
        """Keys found here (and so asked of Redis)."""
        self.asked = 0
        """Keys tested."""

    def __len__(self) -> int:
        return sum(f.count for filters in self._buckets.values() for f in filters)

    @property
    def nbytes(self) -> int:
        return sum(len(f.bits) for filters in self._buckets.values() for f in filters)

    @property
    def filters(self) -> int:
        return sum(len(filters) for filters in self._buckets.values())

    def expire(self, now: int) -> None:
        size, window = self.bucket_ms, self.window_ms
        for number in [n for n in self._buckets if (n + 1) * size + window <= now]:
            del self._buckets[number]

    def reserve(self, count: int, newest_anchor_ms: int, now: int) -> None:
        """Room for ``count`` keys to come with anchors at most ``newest_anchor_ms`` (keys
        read back from Redis: their number is known before they are)."""
        self.expire(now)
        if count > 0 and newest_anchor_ms + self.window_ms > now:
            number = newest_anchor_ms // self.bucket_ms
            self._buckets.setdefault(number, []).append(BloomFilter(count))

    def add(self, keys: list[bytes], newest_anchor_ms: int, now: int, rate: bool = True) -> None:
        """Forgotten keys whose anchors are at most ``newest_anchor_ms`` (``rate``: they
        tell the rate keys are forgotten at)."""
        self.expire(now)
        if rate:
            if self._last_add_ms and keys:
                measured = len(keys) / max(now - self._last_add_ms, 1)
                self._rate = measured if not self._rate else (self._rate + measured) / 2
            self._last_add_ms = now
        if not keys or newest_anchor_ms + self.window_ms <= now:
            return  # every window of these keys has passed
        number = newest_anchor_ms // self.bucket_ms
        filters = self._buckets.setdefault(number, [])
        while keys:
            last = filters[-1] if filters else None
            if last is None or last.count >= last.capacity:
                so_far = sum(f.count for f in filters)
                before = sum(f.count for f in self._buckets.get(number - 1, ()))
                left_ms = (number + 1) * self.bucket_ms - newest_anchor_ms
                expected = int(self._rate * left_ms * self.HEADROOM)
                # A burst's rate over a long bucket: grown in steps of at most 16 times.
                known = max(len(keys), so_far, before)
                last = BloomFilter(max(known, min(expected, self.GROWTH * known)))
                filters.append(last)
            room = last.capacity - last.count
            last.add(keys[:room] if room < len(keys) else keys)
            keys = keys[room:]

    def might_hold(self, keys: list[bytes], now: int) -> list[bytes]:
        """Those of ``keys`` some filter may hold (the others were not forgotten)."""
        self.expire(now)
        self.asked += len(keys)
        hits: list[bool] | None = None
        for filters in self._buckets.values():
            for bloom in filters:
                found = bloom.test(keys)
                hits = found if hits is None else list(map(operator.or_, hits, found))
        if hits is None:
            return []
        maybe = list(compress(keys, hits))
        self.hits += len(maybe)
        return maybe

    def clear(self) -> None:
        self._buckets.clear()


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

    def holds_any(self, keys: set[bytes]) -> bool:
        if self._table is None:
            return not self._dict.keys().isdisjoint(keys)
        if not self._count:
            return False
        found: bool = window.compiled_keys.table_find(self._table, keys, True)
        return found

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
    bookkeeping per key (a key stored again young keeps its latest anchor). With
    ``forgotten``, a generation forgotten goes into its Bloom filters. Each generation
    is a ``KeyTable`` (compiled where built; ``compiled=False``: the dict path).
    """

    def __init__(
        self, capacity: int, forgotten: ForgottenKeys | None = None, compiled: bool | None = None
    ) -> None:
        self.capacity = capacity
        self._half = max(capacity // 2, 1)
        self._compiled = compiled
        self._young = KeyTable(compiled)
        self._old = KeyTable(compiled)
        self._young_newest = 0
        self._old_newest = 0
        """The newest anchor each generation got."""
        self.forgotten = forgotten
        self.hits = 0
        self.forgot_ms = 0
        """Broker time at which keys were last forgotten to make room (0: never): a key
        stored before then may be missing here (but not from ``forgotten``)."""

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
        if anchor_ms > self._young_newest:
            self._young_newest = anchor_ms
        if len(young) >= self._half:
            if len(self._old):
                self.forgot_ms = now = now_ms()
                if self.forgotten is not None:
                    self.forgotten.add(self._old.keys(), self._old_newest, now)
            self._old, self._young = young, KeyTable(self._compiled, like=young)
            self._old_newest, self._young_newest = self._young_newest, 0

    def known(self, keys: set[bytes]) -> set[bytes]:
        """Those of ``keys`` held here (whatever their anchors)."""
        found = self._young.found(keys)
        if len(self._old):
            found |= self._old.found(keys)
        return found

    def none_known(self, keys: set[bytes]) -> bool:
        """True when none of ``keys`` is held here (no set of hits built)."""
        return not self._young.holds_any(keys) and not self._old.holds_any(keys)

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
        """Forgets every key (into ``forgotten`` when there is one)."""
        if len(self._young) or len(self._old):
            self.forgot_ms = now = now_ms()
            if self.forgotten is not None:
                newest = max(self._young_newest, self._old_newest)
                self.forgotten.add([*self._old.keys(), *self._young.keys()], newest, now)
        self._young, self._old = KeyTable(self._compiled), KeyTable(self._compiled)
        self._young_newest = self._old_newest = 0


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
