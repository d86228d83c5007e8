"""A topic scope with one writer decides from the broker's memory of its whole window:
Redis is never asked about a key and nothing is claimed; Redis's copy of the window
(one packed value per confirmation) is read back into memory when the topic loads."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest

from dedup_broker.key_dedup.claims import GroupKeys
from dedup_broker.key_dedup.scope import KeyScope
from dedup_broker.key_dedup.store import (
    KeyStore,
    KeyStoreUnavailableError,
    ScopeKeys,
    pack_runs,
    unpack_runs,
)
from dedup_broker.key_dedup.window import KeyDedupPolicy, OnRedisUnavailable, PackedKeys, now_ms

WINDOW = 60_000


class FakeStore:
    """Redis as the scope sees it: confirmations (packed, as the real store keeps a single
    writer's), reading them back, claims (counted: a single writer makes none)."""

    def __init__(self) -> None:
        self.confirmations: list[bytes] = []
        self.claims = 0
        self.reads = 0
        self.down = False

    async def marker_present(self, scope: ScopeKeys) -> bool:
        return True

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
        if self.down:
            raise KeyStoreUnavailableError("down")
        self.confirmations.append(pack_runs(runs))
        return True

    async def read_window(
        self, scope: ScopeKeys, now: int, window_ms: int
    ) -> AsyncIterator[tuple[int, memoryview]]:
        self.reads += 1
        if self.down:
            raise KeyStoreUnavailableError("down")
        for value in self.confirmations:
            await asyncio.sleep(0)
            for run in unpack_runs(value):
                yield run


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


def _repeats(scope: KeyScope, keys: list[bytes]) -> set[bytes]:
    """The keys the single writer finds held already; the write of the others is lost
    (their keys freed again)."""
    assert scope.writes is not None
    sorting = scope.writes.sort(PackedKeys.of(cast("list[bytes | None]", keys)), now_ms())
    if sorting.write is not None:
        scope.writes.settle(sorting.write, False)
    if sorting.keep is None:
        return set()
    return {k for k, kept in zip(keys, sorting.keep, strict=True) if not kept}


def _keys(*names: str) -> list[bytes | None]:
    return [name.encode().ljust(16, b".") for name in names]


def _digests(label: str, count: int) -> list[bytes]:
    return [hashlib.sha256(b"%s %d" % (label.encode(), n)).digest()[:16] for n in range(count)]


def test_memory_holds_the_whole_window_and_decides_without_redis() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store, cache=100)  # the cache size bounds other scopes only
        stored = _digests("stored", 5_000)
        for start in range(0, len(stored), 500):
            scope.stored(stored[start : start + 500], now_ms(), "ledger", f"0:{start}")
        stats = scope.stats()
        assert stats["windowKeys"] == 5_000 and stats["localCacheKeys"] == 5_000
        assert cast(int, stats["windowBytes"]) <= 5_000 * 32
        fresh = _digests("fresh", 2_000)
        assert _repeats(scope, [*stored[::10], *fresh]) == set(stored[::10])
        assert _repeats(scope, fresh) == set()  # the lost write freed them
        assert store.claims == 0 and scope.stats()["windowKeys"] == 5_000
        await scope.close()

    asyncio.run(scenario())


def test_a_key_whose_window_passed_is_new_again() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store)
        old, recent = _digests("old", 3), _digests("recent", 3)
        scope.stored(old, now_ms() - WINDOW - 1, "ledger", "0:0")
        scope.stored(recent, now_ms() - WINDOW + 5_000, "ledger", "0:1")
        assert _repeats(scope, [*old, *recent]) == set(recent)
        await scope.close()

    asyncio.run(scenario())


def test_a_load_reads_redis_copy_into_memory_once() -> None:
    async def scenario() -> None:
        store = FakeStore()
        earlier = _digests("earlier", 3_000)
        # What an earlier life of the topic confirmed: three confirmations, two anchors.
        store.confirmations = [
            pack_runs([(earlier[:1_000], now_ms() - 1_000)]),
            pack_runs([(earlier[1_000:2_000], now_ms() - 500), (earlier[2_000:], now_ms())]),
        ]
        scope = _scope(store)
        await scope.load_window()
        await scope.load_window()
        assert store.reads == 1
        fresh = _digests("fresh", 1_000)
        assert _repeats(scope, [*earlier[::7], *fresh]) == set(earlier[::7])
        assert store.claims == 0
        await scope.close()

    asyncio.run(scenario())


def test_a_load_that_cannot_read_redis_fails_and_reads_again() -> None:
    async def scenario() -> None:
        store = FakeStore()
        key = _digests("k", 1)
        store.confirmations = [pack_runs([(key, now_ms())])]
        store.down = True
        scope = _scope(store)
        with pytest.raises(KeyStoreUnavailableError):
            await scope.load_window()
        store.down = False
        await scope.load_window()
        assert scope.cache.known(set(key)) == set(key)
        await scope.close()

    asyncio.run(scenario())


def test_scopes_with_several_writers_keep_no_window() -> None:
    scope = _scope(FakeStore(), single=False)
    assert scope.window is None and "windowKeys" not in scope.stats()


def test_scopes_with_several_writers_still_claim() -> None:
    async def scenario() -> None:
        store = FakeStore()
        scope = _scope(store, single=False)
        await _group(scope, store).lookup([_keys("a")])
        assert store.claims == 1

    asyncio.run(scenario())


def test_packed_confirmations_round_trip_and_refuse_a_cut_value() -> None:
    keys = _digests("p", 5)
    value = pack_runs([(keys[:2], 7), ([], 8), (keys[2:], 2**40)])
    runs = [(anchor, bytes(packed)) for anchor, packed in unpack_runs(value)]
    assert runs == [(7, b"".join(keys[:2])), (2**40, b"".join(keys[2:]))]
    with pytest.raises(ValueError):
        unpack_runs(value[:-3])
