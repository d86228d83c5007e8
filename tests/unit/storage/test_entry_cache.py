"""The broker-wide entry cache."""

from __future__ import annotations

from dedup_broker.storage.ledger.entry_cache import EntryCache
from dedup_broker.storage.values import Entry, Position


def entry(ledger: int, entry_id: int, size: int) -> Entry:
    return Entry(Position(ledger, entry_id), bytes([entry_id % 256]) * size, 1000 + entry_id)


def test_evicts_oldest_first_within_budget() -> None:
    cache = EntryCache(100)
    for i in range(5):
        cache.put(entry(1, i, 30))
    assert cache.size_bytes == 90
    assert [i for i in range(5) if cache.get(Position(1, i)) is not None] == [2, 3, 4]
    assert cache.get(Position(1, 3)) == entry(1, 3, 30)
    assert (cache.hits, cache.misses) == (4, 2)


def test_too_large_and_duplicate_entries_are_not_cached() -> None:
    cache = EntryCache(10)
    cache.put(entry(1, 0, 11))
    assert len(cache) == 0
    cache.put(entry(1, 1, 4))
    cache.put(entry(1, 1, 4))
    assert cache.size_bytes == 4


def test_invalidate_ledgers_and_clear() -> None:
    cache = EntryCache(1000)
    for ledger in (1, 2, 3):
        cache.put(entry(ledger, 0, 10))
    cache.invalidate_ledgers([1, 3])
    assert [ledger for ledger in (1, 2, 3) if cache.get(Position(ledger, 0))] == [2]
    assert cache.size_bytes == 10
    cache.clear()
    assert len(cache) == 0 and cache.size_bytes == 0


def test_zero_budget_caches_nothing() -> None:
    cache = EntryCache(0)
    cache.put(entry(1, 0, 1))
    assert cache.get(Position(1, 0)) is None


def test_an_idle_ledger_s_recent_entries_are_dropped_and_nothing_else() -> None:
    cache = EntryCache(1000)
    for i in range(4):
        cache.put(entry(7, i, 10))
    cache.put(entry(8, 0, 10))
    cache.put(entry(7, 9, 10))  # read back from elsewhere in the ledger: not a tail
    assert cache.drop_recent(7, 4) == 4
    assert [i for i in range(10) if cache.get(Position(7, i))] == [9]
    assert cache.get(Position(8, 0)) is not None
    assert cache.size_bytes == 20
    assert cache.drop_recent(7, 4) == 0
