"""Which managed ledger each ledger id was allocated for, read once from the ids topic.

Opening a managed ledger asks which ids were allocated to it after its last listed ledger:
the orphans of a crash between a ledger's creation and its listing (PIP-186: nothing is
left behind). Asked of the ids topic itself, each open read every allocation since that
ledger, whoever made it: reloading N topics after a restart read O(N²) records and took
most of the broker's CPU. The index follows the topic once, in offset order, and keeps
per name only the ids not yet known to be listed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from dedup_broker.storage import formats
from dedup_broker.storage.kafka.reader import ValuesVisitor


class EndOffsets(Protocol):
    async def high_watermark(self, topic: str, partition: int = 0) -> int: ...


class ValueScanner(Protocol):
    async def scan(
        self,
        topic: str,
        start: int,
        end: int,
        visit: ValuesVisitor,
        partition: int = 0,
    ) -> int: ...


INDEX_CAPACITY = 100_000
"""Allocations the index remembers (about 100 bytes each, 10 MB when full); older ones
are read from the topic when asked about, as before the index."""


class AllocationIndex:
    """Ledger ids by the managed ledger they were allocated for, over the latest
    ``capacity`` allocations.

    A name asked about forgets its ids at or below its last listed ledger, so a loaded
    managed ledger keeps about one (its current ledger); the window bounds the rest."""

    def __init__(
        self,
        ids_topic: str,
        offsets: EndOffsets,
        scanner: ValueScanner,
        capacity: int = INDEX_CAPACITY,
    ) -> None:
        self._topic = ids_topic
        self._offsets = offsets
        self._scanner = scanner
        self._capacity = capacity
        self._base: int | None = None
        """The first offset of the window (None until the first question)."""
        self._read_to = 0
        """Every allocation in ``[_base, _read_to)`` is in ``_by_name``."""
        self._window: deque[tuple[int, str]] = deque()
        self._by_name: dict[str, list[int]] = {}
        self._catching_up = asyncio.Lock()

    async def allocated_to(self, name: str, after_id: int) -> list[int]:
        """Ids allocated for ``name`` after ``after_id``, up to the topic's end now.

        ``after_id`` is the name's last listed ledger: ids at or below it are listed or
        were handled when it was listed, so they are forgotten."""
        end = await self._offsets.high_watermark(self._topic)
        async with self._catching_up:  # callers arriving meanwhile share the next read
            if self._base is None:
                self._base = self._read_to = max(0, end - self._capacity)
            if self._read_to < end:
                await self._read(end)
            base = self._base
        older = await self._read_older(name, after_id + 1, min(base, end))
        ids = self._by_name.get(name, [])
        kept = [ledger_id for ledger_id in ids if ledger_id > after_id]
        if kept:
            self._by_name[name] = kept
        else:
            self._by_name.pop(name, None)
        return older + [ledger_id for ledger_id in kept if ledger_id < end]

    async def _read(self, end: int) -> None:
        for offset, purpose in await self._allocations(self._read_to, end):
            self._by_name.setdefault(purpose, []).append(offset)
            self._window.append((offset, purpose))
        self._read_to = max(self._read_to, end)
        while len(self._window) > self._capacity:
            offset, purpose = self._window.popleft()
            ids = self._by_name.get(purpose)
            if ids and ids[0] == offset:
                del ids[0]
                if not ids:
                    del self._by_name[purpose]
            self._base = offset + 1

    async def _read_older(self, name: str, start: int, end: int) -> list[int]:
        """Before the window: the ids of ``name`` read from the topic itself."""
        if start >= end:
            return []
        return [
            offset for offset, purpose in await self._allocations(start, end) if purpose == name
        ]

    async def _allocations(self, start: int, end: int) -> list[tuple[int, str]]:
        read: list[tuple[int, list[bytes]]] = []

        def visit(first: int, values: list[bytes]) -> None:  # in a reader thread
            read.append((first, values))

        await self._scanner.scan(self._topic, start, end, visit)
        return [
            (offset, formats.decode_ledger_id_allocation(value))
            for first, values in read
            for offset, value in enumerate(values, first)
            if value
        ]
