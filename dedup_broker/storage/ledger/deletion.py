"""What gets deleted (trimming rules) and how (an injected ledger deleter).

The storage layer decides which ledgers a managed ledger no longer needs; it does not
know how deletion is made safe. A :class:`LedgerDeleter` is injected: the direct one
deletes ledger topics after the metadata update (a crash in between orphans them); the
two-phase one (``system_topics``) records a durable intent per ledger first.

Protocol of a deletion: ``mark`` is called before the metadata update and returns the
ledgers that may leave the list (the two-phase deleter: those whose intent Kafka
acknowledged); the list is updated for those only; then ``after_metadata`` is called.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from dedup_broker.errors import StorageError
from dedup_broker.storage.values import MB, LedgerInfo, LedgerToDelete, Position, Retention

if TYPE_CHECKING:
    from dedup_broker.storage.ledger.ledger_store import LedgerStore
    from dedup_broker.storage.offload.filesystem import FilesystemOffloader

log = logging.getLogger(__name__)


def targets_for(name: str, ledgers: Iterable[LedgerInfo]) -> list[LedgerToDelete]:
    """What deleting these ledgers entirely means: each copy they still have."""
    return [
        LedgerToDelete(name, info.ledger_id, kafka=info.in_kafka, offload=info.offload)
        for info in ledgers
    ]


class DirectLedgerDeleter:
    """Deletes ledger topics (and offloaded copies) right after the metadata update (no
    intent, no worker)."""

    def __init__(self, store: LedgerStore, offloader: FilesystemOffloader | None = None) -> None:
        self._store = store
        self._offloader = offloader

    async def mark(self, ledgers: Sequence[LedgerToDelete]) -> set[int]:
        return {ledger.ledger_id for ledger in ledgers}

    async def after_metadata(self, ledgers: Sequence[LedgerToDelete]) -> None:
        ids = [ledger.ledger_id for ledger in ledgers if ledger.kafka]
        try:
            await self._store.delete(ids)
        except StorageError as exc:
            log.error("deleting ledgers %s failed; they are orphaned: %s", ids, exc)
        for ledger in ledgers:
            if ledger.offload is not None and self._offloader is not None:
                try:
                    await asyncio.to_thread(
                        self._offloader.delete, ledger.ledger_id, ledger.offload.uid
                    )
                except OSError as exc:
                    log.error("deleting offloaded ledger %d failed: %s", ledger.ledger_id, exc)


def consumed_ledgers(
    ledgers: Sequence[LedgerInfo],
    slowest_mark_delete: Position | None,
    retention: Retention,
    now_ms: int | None = None,
    last_may_go: bool = False,
) -> list[int]:
    """Ids of the oldest closed ledgers that every durable cursor has passed and that
    retention lets go, in order (Pulsar's trimming rule).

    ``slowest_mark_delete`` is the lowest mark-delete position of the durable cursors, None
    when there are none (then every closed ledger counts as consumed). An open ledger is
    never returned, nor the last one unless ``last_may_go`` (ledgers created lazily: the
    next append creates the next one).
    """
    if retention.infinite or not ledgers:
        return []
    now = int(time.time() * 1000) if now_ms is None else now_ms
    total = sum(info.size for info in ledgers)
    removed_size = 0
    result: list[int] = []
    for index, info in enumerate(ledgers):
        if info.is_open or (index == len(ledgers) - 1 and not last_may_go):
            break
        if slowest_mark_delete is not None and not _passed(info, slowest_mark_delete):
            break
        over_size = retention.size_mb >= 0 and total - removed_size > retention.size_mb * MB
        expired = retention.time_minutes >= 0 and now - info.timestamp_ms > (
            retention.time_minutes * 60_000
        )
        if not (over_size or expired):
            break
        result.append(info.ledger_id)
        removed_size += info.size
    return result


def _passed(info: LedgerInfo, mark_delete: Position) -> bool:
    """True if everything in the closed ledger ``info`` is at or before ``mark_delete``."""
    if mark_delete.ledger_id != info.ledger_id:
        return mark_delete.ledger_id > info.ledger_id
    return mark_delete.entry_id >= info.entries - 1


def slowest(positions: Iterable[Position]) -> Position | None:
    return min(positions, default=None)
