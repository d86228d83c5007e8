"""Bloom filters of the keys a single writer's cache forgot: the compiled and the
pure-Python bits are the same, nothing forgotten is missed, and the filters expire with
the window."""

from __future__ import annotations

import hashlib
import random

import pytest

from dedup_broker.key_dedup import window
from dedup_broker.key_dedup.memory import (
    BLOOM_BLOCK_BYTES,
    BloomFilter,
    ForgottenKeys,
    LocalKeyCache,
    bloom_add_python,
    bloom_test_python,
)

needs_compiled = pytest.mark.skipif(
    window.compiled_keys is None, reason="the compiled key reader is not built here"
)


def _keys(count: int, seed: int = 0) -> list[bytes]:
    return [hashlib.sha256(f"{seed}:{n}".encode()).digest()[:16] for n in range(count)]


@needs_compiled
@pytest.mark.parametrize("blocks", [1, 2, 3, 17, 1000])
def test_compiled_and_python_bits_are_identical(blocks: int) -> None:
    rng = random.Random(blocks)
    keys = [rng.randbytes(16) for _ in range(blocks * 40)]
    compiled, python = bytearray(blocks * BLOOM_BLOCK_BYTES), bytearray(blocks * 64)
    window.compiled_keys.bloom_add(compiled, keys[::2])
    bloom_add_python(python, keys[::2])
    assert compiled == python
    assert window.compiled_keys.bloom_test(compiled, keys) == bloom_test_python(python, keys)
    # Edge keys: all zeros and all ones reach the first and the last block.
    edges = [bytes(16), b"\xff" * 16]
    window.compiled_keys.bloom_add(compiled, edges)
    bloom_add_python(python, edges)
    assert compiled == python
    assert compiled[:64] != bytes(64) and compiled[-64:] != bytes(64)


@pytest.mark.parametrize("python", [True, False])
def test_bad_keys_and_sizes_are_refused_alike(python: bool) -> None:
    if not python and window.compiled_keys is None:
        pytest.skip("the compiled key reader is not built here")
    add = bloom_add_python if python else window.compiled_keys.bloom_add
    test = bloom_test_python if python else window.compiled_keys.bloom_test
    with pytest.raises(ValueError):
        add(bytearray(64), [b"short"])
    with pytest.raises(ValueError):
        test(bytearray(64), [b"x" * 17])
    with pytest.raises(ValueError):
        add(bytearray(65), [bytes(16)])
    with pytest.raises(ValueError):
        test(bytearray(), [bytes(16)])


def test_a_full_filter_misses_nothing_and_has_few_false_positives() -> None:
    bloom = BloomFilter(20_000)
    held = _keys(20_000)
    bloom.add(held)
    assert all(bloom.test(held))
    others = _keys(100_000, seed=1)
    rate = sum(bloom.test(others)) / len(others)
    assert rate < 0.006  # 12 bits and 7 hashes a key: about 0.4%
    assert len(bloom.bits) <= 20_000 * 12 // 8 + BLOOM_BLOCK_BYTES


def test_forgotten_keys_expire_with_the_window() -> None:
    forgotten = ForgottenKeys(window_ms=10_000)  # buckets of 5 s by anchor
    first, second = _keys(100), _keys(100, seed=2)
    forgotten.add(first, newest_anchor_ms=1_000, now=1_500)  # bucket 0: until 15 s
    forgotten.add(second, newest_anchor_ms=7_000, now=7_500)  # bucket 1: until 20 s
    assert set(forgotten.might_hold(first + second, now=8_000)) == set(first + second)
    assert set(forgotten.might_hold(first, now=14_999)) == set(first)
    # From 15 s on no window of bucket 0's keys (anchors before 5 s) reaches now.
    assert forgotten.might_hold(first, now=15_000) == []
    assert set(forgotten.might_hold(second, now=19_999)) == set(second)
    assert forgotten.might_hold(second, now=20_000) == [] and len(forgotten) == 0
    # Keys whose windows have all passed are not kept at all.
    forgotten.add(first, newest_anchor_ms=1_000, now=11_000)
    assert forgotten.filters == 0


def test_a_bucket_grows_by_another_filter_and_misses_nothing() -> None:
    forgotten = ForgottenKeys(window_ms=3_600_000)
    groups = [_keys(1_000, seed=n) for n in range(6)]
    for n, keys in enumerate(groups):  # one group forgotten per second, same bucket
        forgotten.add(keys, newest_anchor_ms=1_000 + n, now=1_000 + 1_000 * n)
    assert len(forgotten) == 6_000 and forgotten.filters >= 2
    every = [k for keys in groups for k in keys]
    assert set(forgotten.might_hold(every, now=10_000)) == set(every)
    # Sized from the rate keys came at, not a filter per group.
    assert forgotten.filters < 6
    assert forgotten.nbytes < 6_000 * 1.5 * ForgottenKeys.GROWTH


def test_steady_load_sizes_each_bucket_once() -> None:
    """Half a window of keys per bucket at a steady rate: one filter per bucket after the
    first, about 1.5 bytes a key (plus a quarter to spare)."""
    window_ms, per_second, generation = 20_000, 2_000, 500
    forgotten = ForgottenKeys(window_ms)
    for seed, now in enumerate(range(250, 60_000, 250)):  # 500 keys every 250 ms
        forgotten.add(_keys(generation, seed), newest_anchor_ms=now - 100, now=now)
    live = window_ms * 3 // 2 * per_second // 1_000  # at most 1.5 windows of keys
    assert len(forgotten) <= live + generation
    assert forgotten.filters <= 4
    assert forgotten.nbytes <= live * 1.5 * 1.25 * 1.1


def test_the_cache_forgets_a_generation_into_its_filters() -> None:
    forgotten = ForgottenKeys(window_ms=60_000)
    cache = LocalKeyCache(capacity=4, forgotten=forgotten)
    keys = _keys(6)
    anchor = window.now_ms()
    cache.add_all(keys[:2], anchor - 5)  # half the capacity: the old generation
    assert len(forgotten) == 0
    cache.add_all(keys[2:4], anchor)  # the next half: the first two forgotten
    assert len(forgotten) == 2 and cache.known(set(keys)) == set(keys[2:4])
    assert set(forgotten.might_hold(keys, window.now_ms())) >= set(keys[:2])
    cache.add_all(keys[4:], anchor)
    assert len(forgotten) == 4 and cache.known(set(keys)) == set(keys[4:])
    cache.clear()
    assert len(cache) == 0
    assert set(forgotten.might_hold(keys, window.now_ms())) == set(keys)


def test_the_pure_python_path_gives_the_same_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    def filled() -> ForgottenKeys:
        forgotten = ForgottenKeys(window_ms=60_000)
        forgotten.add(_keys(3_000), newest_anchor_ms=1_000, now=2_000)
        return forgotten

    compiled = filled()
    monkeypatch.setattr(window, "compiled_keys", None)
    python = filled()
    probe = _keys(3_000) + _keys(3_000, seed=5)
    assert python.might_hold(probe, now=3_000) == compiled.might_hold(probe, now=3_000)
    assert [f.bits for f in python._buckets[0]] == [f.bits for f in compiled._buckets[0]]
