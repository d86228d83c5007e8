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


def test_claim_answers_every_key_in_order(redis_url: str) -> None:
    scope = ScopeKeys(f"store-claim-{uuid.uuid4().hex}")
    now = 1_000_000_000

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            # Key 1 stored inside the window, key 2 stored long ago, key 3 another
            # owner's claim; 0 and 4 are new.
            await store.confirm(
                scope, [(_key(1), now - 10), (_key(2), now - WINDOW_MS)], now, WINDOW_MS, {}
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
    assert first == [b"", f"t:{now - 10}".encode(), b"", b"p:other", b""]
    assert again == [b"p:me", b"p:me"]


def test_confirm_stores_each_key_with_its_own_anchor(redis_url: str) -> None:
    scope = ScopeKeys(f"store-confirm-{uuid.uuid4().hex}")
    now = int(time.time() * 1000)
    anchors = [now - 5, now - 5, now - 3, now - 5, now - 1, now - 1]
    items = [(_key(n), anchor) for n, anchor in enumerate(anchors)]

    async def scenario() -> bool:
        store = KeyStore(redis_url)
        try:
            await store.set_marker(scope)
            return await store.confirm(scope, items, now, WINDOW_MS, {"ledger-a": "3:7"})
        finally:
            await store.close()

    assert asyncio.run(scenario()) is True
    direct = redis.Redis.from_url(redis_url)
    try:
        for key, anchor in items:
            name = scope.key(key)
            assert direct.get(name) == f"t:{anchor}".encode()
            ttl = direct.pttl(name)
            assert anchor + WINDOW_MS + EXPIRY_MARGIN_MS - now - 5_000 < ttl
            assert ttl <= anchor + WINDOW_MS + EXPIRY_MARGIN_MS - now
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
            return await store.confirm(scope, [(_key(1), 1)], 1, WINDOW_MS, {})
        finally:
            await store.close()

    assert asyncio.run(scenario()) is False
