"""A topic scope with one writer decides from the broker's memory: Redis is read only for
keys stored before that memory begins, and nothing is claimed."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from dedup_broker.key_dedup.claims import GroupKeys, ScopeRebuildingError
from dedup_broker.key_dedup.memory import ForgottenKeys
from dedup_broker.key_dedup.scope import KeyScope
from dedup_broker.key_dedup.store import KeyStore, KeyStoreUnavailableError, ScopeKeys
from dedup_broker.key_dedup.window import KeyDedupPolicy, KeyState, OnRedisUnavailable, now_ms

WINDOW = 60_000


class FakeStore:
    """Redis as the single writer's path sees it: lookups (read) and confirmations."""

    def __init__(self) -> None:
        self.stored: dict[bytes, int] = {}
        self.lookups: list[list[bytes]] = []
        self.claims = 0
        self.down = False
        self.lost = False

    async def lookup(
        self, scope: ScopeKeys, keys: Sequence[bytes], now: int, window_ms: int
    ) -> dict[int, int]:
        if self.down:
            raise KeyStoreUnavailableError("down")
        if self.lost:
            from dedup_broker.key_dedup.store import ScopeLostError

            raise ScopeLostError("lost")
        self.lookups.append(list(keys))
        return {
            i: self.stored[k]
            for i, k in enumerate(keys)
            if k in self.stored and self.stored[k] + window_ms > now
        }

    async def window_size(self, scope: ScopeKeys, now: int, window_ms: int) -> int:
        return len(self.stored)

    async def scan_window(
        self, scope: ScopeKeys, now: int, window_ms: int, count: int = 10_000
    ) -> AsyncIterator[list[bytes]]:
        if self.down:
            raise KeyStoreUnavailableError("down")
        keys = list(self.stored)
        for start in range(0, len(keys), 100):
            await asyncio.sleep(0)
            yield keys[start : start + 100]

    async def marker_present(self, scope: ScopeKeys) -> bool:
        return not self.lost

    async def claim(self, *args: Any) -> dict[int, bytes]:
        self.claims += 1
        return {}

    async def confirm(
        self,
        scope: ScopeKeys,
        runs: Sequence[tuple[Sequence[bytes], int]],
        now: int,
        window_ms: int,
        checkpoints: dict[str, str],
    ) -> bool:
        for keys, anchor in runs:
            self.stored.update(dict.fromkeys(keys, anchor))
        return True


class FakeService:
    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.accepted_without_redis = 0
        self.pending_ttl_ms = 120_000


async def _no_members(scope: KeyScope) -> list[Any]:
    return []


def _scope(
    store: FakeStore,
    cache: int = 1_000,
    single: bool = True,
    accept: bool = False,
) -> KeyScope:
    policy = KeyDedupPolicy(
        enabled=True,
        window_ms=WINDOW,
        on_redis_unavailable=OnRedisUnavailable.ACCEPT if accept else OnRedisUnavailable.REJECT,
    )
    return KeyScope(
        "c|topic:t|content|60000",
        policy,
        cast(KeyStore, store),
        cache,
        _no_members,
        single_writer=single,
    )


def _group(scope: KeyScope, store: FakeStore) -> GroupKeys:
    return GroupKeys(scope, scope.policy, cast(Any, FakeService(store)), b"owner")


def _keys(*names: str) -> list[bytes | None]:
    return [name.encode().ljust(16, b".") for name in names]


def test_complete_memory_decides_new_keys_without_redis() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store)
        scope.memory_complete()
        group = _group(scope, store)
        keys = _keys("a", "b")
        await group.lookup([keys])
        assert store.lookups == [] and store.claims == 0
        assert set(group.states.values()) == {KeyState.NEW}
        assert group.owned == set(keys)
        assert all(k in scope.in_flight for k in group.owned)
        # Stored: the next group finds them in memory.
        scope.stored(cast(list[bytes], keys), now_ms(), "ledger", "1:0")
        again = _group(scope, store)
        await again.lookup([keys])
        assert set(again.states.values()) == {KeyState.STORED}
        await scope.close()

    asyncio.run(scenario())


def test_memory_that_does_not_reach_back_a_window_asks_redis_and_claims_nothing() -> None:
    async def scenario() -> None:
        store = FakeStore()
        old, new = _keys("old", "new")
        assert old is not None
        store.stored[old] = now_ms() - 1_000  # stored by an earlier life of the topic
        scope = _scope(store)  # memory begins now: Redis knows what came before
        group = _group(scope, store)
        await group.lookup([[old, new]])
        assert [set(k) for k in store.lookups] == [{old, new}] and store.claims == 0
        assert group.states == {old: KeyState.STORED, new: KeyState.NEW}
        assert group.owned == {new} and old not in scope.in_flight
        assert scope.cache.stored(old, now_ms(), WINDOW)

    asyncio.run(scenario())


def test_a_key_forgotten_to_make_room_is_asked_and_found_even_before_redis_has_it() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store, cache=4)
        scope.memory_complete()
        first = cast(list[bytes], _keys("k0", "k1"))
        scope._confirm.append((first, now_ms()))  # stored, its confirmation not sent yet
        scope.cache.add_all(first, now_ms())
        for n in range(2, 8):  # pushes the first keys out of the cache
            scope.cache.add_all(cast(list[bytes], _keys(f"k{n}")), now_ms())
        # Memory still decides: the forgotten keys are in the cache's filters.
        assert scope.cache.forgot_ms > 0 and scope.memory_decides(now_ms())
        new = hashlib.sha256(b"new").digest()[:16]
        group = _group(scope, store)
        await group.lookup([[*first, new]])
        # Only the filter's hits are asked; the unconfirmed keys are found in memory.
        assert [set(k) for k in store.lookups] == [set(first)]
        assert group.states == {**dict.fromkeys(first, KeyState.STORED), new: KeyState.NEW}
        assert scope.stats()["forgottenFilterHits"] == 2

    asyncio.run(scenario())


def test_forgotten_keys_known_only_to_redis_are_found_and_new_keys_are_not_asked() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store, cache=100)
        scope.memory_complete()
        stored = [hashlib.sha256(b"%d" % n).digest()[:16] for n in range(1_000)]
        for n in range(0, 1_000, 10):
            scope.stored(stored[n : n + 10], now_ms(), "ledger", f"1:{n}")
        await scope.close()  # the confirmations reach (the fake) Redis
        assert len(store.stored) == 1_000 and len(scope.cache) <= 100
        fresh = [hashlib.sha256(b"fresh %d" % n).digest()[:16] for n in range(2_000)]
        group = _group(scope, store)
        await group.lookup([[*stored[:500], *fresh]])
        assert all(group.states[k] is KeyState.STORED for k in stored[:500])
        assert all(group.states[k] is KeyState.NEW for k in fresh)
        asked = {k for keys in store.lookups for k in keys}
        assert set(stored[:500]) - set(scope.cache.known(set(stored))) <= asked
        assert len(asked & set(fresh)) < 60  # false positives only: about 1% of 2,000
        stats = cast(dict[str, int], scope.stats())
        # Forgotten in bursts under a millisecond apart: sized at most 16 times ahead.
        assert stats["forgottenKeys"] >= 800
        assert stats["forgottenFilterBytes"] <= 1_500 * 1.5 * ForgottenKeys.GROWTH

    asyncio.run(scenario())


def test_scopes_with_several_writers_keep_no_filter() -> None:
    scope = _scope(FakeStore(), single=False)
    assert scope.cache.forgotten is None and "forgottenKeys" not in scope.stats()


def test_redis_down_rejects_or_accepts_from_memory() -> None:
    async def scenario() -> None:
        store = FakeStore()
        store.down = True
        scope = _scope(store)
        keys = _keys("x")
        with pytest.raises(KeyStoreUnavailableError):
            await _group(scope, store).lookup([keys])
        assert len(scope.in_flight) == 0
        accepting = _scope(store, accept=True)
        group = _group(accepting, store)
        await group.lookup([keys])
        assert group.states == dict.fromkeys(keys, KeyState.NEW)
        store.down, store.lost = False, True
        with pytest.raises(ScopeRebuildingError):
            await _group(_scope(store), store).lookup([keys])

    asyncio.run(scenario())


def test_scopes_with_several_writers_still_claim() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store, single=False)
        scope.memory_complete()
        assert not scope.memory_decides(now_ms())
        await _group(scope, store).lookup([_keys("a")])
        assert store.claims == 1 and store.lookups == []

    asyncio.run(scenario())


def test_reject_mode_answers_redis_down_once_confirmations_fail() -> None:
    async def scenario() -> None:
        store = FakeStore()
        for accept in (False, True):
            scope = _scope(store, accept=accept)
            scope.memory_complete()
            scope.redis_failing_since = now_ms()
            group = _group(scope, store)
            if accept:
                await group.lookup([_keys("a")])
                assert group.states == dict.fromkeys(_keys("a"), KeyState.NEW)
            else:
                with pytest.raises(KeyStoreUnavailableError):
                    await group.lookup([_keys("a")])
                assert len(scope.in_flight) == 0

    asyncio.run(scenario())


def test_a_load_while_redis_holds_keys_reads_them_into_memory() -> None:
    async def scenario() -> None:
        store = FakeStore()
        earlier = [hashlib.sha256(b"earlier %d" % n).digest()[:16] for n in range(1_000)]
        store.stored.update(dict.fromkeys(earlier, now_ms() - 1_000))  # an earlier life's
        scope = _scope(store, cache=100)
        assert not scope.memory_decides(now_ms())  # memory begins now: Redis is asked
        store.down = True
        scope.learn_window()
        await asyncio.sleep(0.01)
        assert not scope.memory_decides(now_ms())  # not read: still asked of Redis
        store.down = False
        scope.learn_window()
        for _ in range(100):
            await asyncio.sleep(0.001)
            if scope.memory_decides(now_ms()):
                break
        assert scope.memory_decides(now_ms())
        fresh = [hashlib.sha256(b"fresh %d" % n).digest()[:16] for n in range(1_000)]
        group = _group(scope, store)
        await group.lookup([[*earlier[:300], *fresh]])
        assert all(group.states[k] is KeyState.STORED for k in earlier[:300])
        assert all(group.states[k] is KeyState.NEW for k in fresh)
        asked = {k for keys in store.lookups for k in keys}
        assert set(earlier[:300]) <= asked and len(asked & set(fresh)) < 40
        await scope.close()

    asyncio.run(scenario())


def test_reading_the_window_stops_when_redis_lost_it() -> None:
    async def scenario() -> None:
        store = FakeStore()
        store.stored[b"k" * 16] = now_ms()
        store.lost = True
        scope = _scope(store)
        scope.learn_window()
        await asyncio.sleep(0.01)
        assert not scope.memory_decides(now_ms())
        await scope.close()

    asyncio.run(scenario())
