"""Ledgers on their way out of a list whose change is not stored yet.

Between the deleter's ``mark`` and the stored list that no longer names them, a deletion
worker asking about such a ledger is told to come back (``LedgerStatus.PENDING``) rather
than to delete it or to give up. Trimming, offloading, opening and deleting a managed
ledger all go through the one :class:`PendingDeletions` of their broker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator


class PendingDeletions:
    def __init__(self) -> None:
        self._by_name: dict[str, set[int]] = {}

    @contextlib.contextmanager
    def during(self, name: str, ledger_ids: Iterable[int]) -> Iterator[None]:
        """While inside, the ledgers of managed ledger ``name`` are pending."""
        ids = set(ledger_ids)
        pending = self._by_name.setdefault(name, set())
        pending.update(ids)
        try:
            yield
        finally:
            pending.difference_update(ids)
            if not pending:
                self._by_name.pop(name, None)

    def holds(self, name: str, ledger_id: int) -> bool:
        return ledger_id in self._by_name.get(name, ())
