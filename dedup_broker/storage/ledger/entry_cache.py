"""The broker-wide cache of recently appended and read entries.

Tailing consumers read what was just written, so entries are cached as Kafka
acknowledges them and evicted oldest-first once the shared byte budget
(``managedLedgerCacheSizeMB``) is exceeded. Ledger ids are unique across the cluster, so
a position alone identifies an entry.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from dedup_broker.storage.values import Entry, Position


class EntryCache:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[Position, Entry] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: Entry) -> None:
        if len(entry.data) > self.budget_bytes or entry.position in self._entries:
            return
        self._entries[entry.position] = entry
        self._size += len(entry.data)
        while self._size > self.budget_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._size -= len(evicted.data)

    def get(self, position: Position) -> Entry | None:
        entry = self._entries.get(position)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def drop_recent(self, ledger_id: int, end_entry_id: int) -> int:
        """Forget the ledger's entries just before ``end_entry_id``, walking back to the
        first that is not cached: an idle ledger's last appends, which nobody tails (an
        idle topic would otherwise keep its last entry until the budget pushes it out).
        How many were dropped."""
        dropped = 0
        for entry_id in range(end_entry_id - 1, -1, -1):
            entry = self._entries.pop(Position(ledger_id, entry_id), None)
            if entry is None:
                break
            self._size -= len(entry.data)
            dropped += 1
        return dropped

    def invalidate_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Forget every entry of these ledgers (they are being deleted)."""
        drop = set(ledger_ids)
        for position in [p for p in self._entries if p.ledger_id in drop]:
            self._size -= len(self._entries.pop(position).data)

    def clear(self) -> None:
        self._entries.clear()
        self._size = 0
