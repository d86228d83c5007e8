"""Reading a managed ledger's entries: from the broker-wide cache, else from Kafka, or
from tiered storage for an offloaded ledger (same positions: readers cannot tell)."""

from __future__ import annotations

import asyncio

from dedup_broker.errors import OffloadNotConfiguredError, StorageError
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.entry_cache import EntryCache
from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.ledger.ledger_store import LedgerStore
from dedup_broker.storage.offload.filesystem import FilesystemOffloader
from dedup_broker.storage.values import Entry, EntryVisitor, OffloadInfo, Position

_OFFLOADED_SCAN_BYTES = 8 * 1024 * 1024


class EntryReader:
    __slots__ = ("_cache", "_name", "_offloader", "_store")

    def __init__(
        self,
        name: str,
        store: LedgerStore,
        cache: EntryCache,
        offloader: FilesystemOffloader | None = None,
    ) -> None:
        self._name = name
        self._store = store
        self._cache = cache
        self._offloader = offloader

    def _tiered(self, offload: OffloadInfo | None) -> FilesystemOffloader | None:
        """The offloader to read from, if the ledger's offload is complete."""
        if offload is None or not offload.complete:
            return None
        if self._offloader is None:
            raise OffloadNotConfiguredError(
                f"{self._name}: a ledger is offloaded but no offload driver is configured"
            )
        return self._offloader

    async def read(
        self, confirmed: ConfirmedLedgers, start: Position, max_entries: int, max_bytes: int
    ) -> list[Entry]:
        """Entries from ``start`` on, up to the last confirmed, across ledgers; at least
        one (if any is available) even when it alone exceeds ``max_bytes``."""
        ledgers, last = confirmed.ledgers, confirmed.last
        result: list[Entry] = []
        size = 0
        position = ledgers.normalize(start)
        while len(result) < max_entries and position <= last:
            if result and size >= max_bytes:
                break
            entry = self._cache.get(position)
            batch = (
                [entry]
                if entry is not None
                else await self._fetch(
                    ledgers, position, max_entries - len(result), max_bytes - size
                )
            )
            for entry in batch:
                if result and size + len(entry.data) > max_bytes:
                    return result
                result.append(entry)
                size += len(entry.data)
                position = ledgers.next_position(entry.position)
        return result

    async def _fetch(
        self, ledgers: LedgerList, position: Position, max_entries: int, max_bytes: int
    ) -> list[Entry]:
        """A run of entries of one ledger from Kafka, kept in the cache for the next reader."""
        count = ledgers.count(position.ledger_id) or 0
        wanted = min(count - position.entry_id, max_entries)
        offload = ledgers.offload_of(position.ledger_id)
        tiered = self._tiered(offload)
        if tiered is not None and offload is not None:
            entries = await asyncio.to_thread(
                tiered.read,
                position.ledger_id,
                offload.uid,
                position.entry_id,
                wanted,
                max(max_bytes, 1),
            )
        else:
            entries = await self._store.read(
                position.ledger_id, position.entry_id, wanted, max(max_bytes, 1)
            )
        if not entries or entries[0].position != position:
            raise StorageError(f"{self._name}: entry {position} could not be read")
        for entry in entries:
            self._cache.put(entry)
        return entries

    async def scan(
        self, confirmed: ConfirmedLedgers, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Hands entries from ``start`` on (up to the last confirmed, at most
        ``max_entries``) to ``visit``; returns the position of the last one, None if
        there was none.

        The cache is neither consulted nor filled: every entry up to ``last`` is in Kafka
        (or tiered storage), and a replay's entries would only evict what readers need.
        """
        ledgers, last = confirmed.ledgers, confirmed.last
        scanned = 0
        last_seen: Position | None = None
        position = ledgers.normalize(start)
        while scanned < max_entries and position <= last:
            count = ledgers.count(position.ledger_id) or 0
            wanted = min(count - position.entry_id, max_entries - scanned)
            if position.ledger_id == last.ledger_id:
                wanted = min(wanted, last.entry_id - position.entry_id + 1)
            offload = ledgers.offload_of(position.ledger_id)
            tiered = self._tiered(offload)
            if wanted <= 0:
                last_id = position.entry_id - 1
            elif tiered is not None and offload is not None:
                last_id = await asyncio.to_thread(
                    _scan_offloaded, tiered, offload.uid, position, wanted, visit
                )
            else:
                last_id = await self._store.scan(
                    position.ledger_id, position.entry_id, wanted, visit
                )
            if last_id < position.entry_id:
                raise StorageError(f"{self._name}: entry {position} could not be read")
            scanned += last_id - position.entry_id + 1
            last_seen = Position(position.ledger_id, last_id)
            position = ledgers.next_position(last_seen)
        return last_seen

    async def find_by_time(self, confirmed: ConfirmedLedgers, timestamp_ms: int) -> Position:
        """The first entry whose timestamp is >= ``timestamp_ms``, else the position after
        the last confirmed.

        Timestamps are assumed not to decrease along the managed ledger (publish times do
        not); each ledger answers from Kafka's time index in one request for all of them.
        """
        ledgers, last = confirmed.ledgers, confirmed.last
        candidates = [
            info.ledger_id for info in ledgers.infos() if (ledgers.count(info.ledger_id) or 0) > 0
        ]
        in_kafka = []
        found: dict[int, int] = {}
        for ledger_id in candidates:
            offload = ledgers.offload_of(ledger_id)
            tiered = self._tiered(offload)
            if tiered is not None and offload is not None:
                found[ledger_id] = await asyncio.to_thread(
                    tiered.first_at_or_after, ledger_id, offload.uid, timestamp_ms
                )
            else:
                in_kafka.append(ledger_id)
        found |= await self._store.first_offsets_at_or_after(in_kafka, timestamp_ms)
        for ledger_id in candidates:
            entry_id = found.get(ledger_id, -1)
            position = Position(ledger_id, entry_id)
            if 0 <= entry_id < (ledgers.count(ledger_id) or 0) and position <= last:
                return position
        return ledgers.next_position(last)


def _scan_offloaded(
    offloader: FilesystemOffloader,
    uid: str,
    start: Position,
    count: int,
    visit: EntryVisitor,
) -> int:
    """The tiered-storage side of :meth:`EntryReader.scan`, in a worker thread."""
    entry_id, end = start.entry_id, start.entry_id + count
    while entry_id < end:
        entries = offloader.read(
            start.ledger_id, uid, entry_id, end - entry_id, _OFFLOADED_SCAN_BYTES
        )
        if not entries or entries[0].position.entry_id != entry_id:
            break
        visit(start.ledger_id, entry_id, [entry.data for entry in entries])
        entry_id += len(entries)
    return entry_id - 1
