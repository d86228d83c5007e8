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


class AllocationIndex:
    """Ledger ids by the managed ledger they were allocated for.

    Memory: one entry per name with an id not yet asked about (a loaded managed ledger
    keeps about one, its current ledger; a name asked about drops the ids at or below its
    last listed one)."""

    def __init__(self, ids_topic: str, offsets: EndOffsets, scanner: ValueScanner) -> None:
        self._topic = ids_topic
        self._offsets = offsets
        self._scanner = scanner
        self._read_to = 0
        """Every allocation below this offset is in ``_by_name``."""
        self._by_name: dict[str, list[int]] = {}
        self._catching_up = asyncio.Lock()

    async def allocated_to(self, name: str, after_id: int) -> list[int]:
        """Ids allocated for ``name`` after ``after_id``, up to the topic's end now.

        ``after_id`` is the name's last listed ledger: ids at or below it are listed or
        were handled when it was listed, so they are forgotten."""
        end = await self._offsets.high_watermark(self._topic)
        async with self._catching_up:  # callers arriving meanwhile share the next read
            if self._read_to < end:
                await self._read(end)
        ids = self._by_name.get(name, [])
        kept = [ledger_id for ledger_id in ids if ledger_id > after_id]
        if kept:
            self._by_name[name] = kept
        else:
            self._by_name.pop(name, None)
        return [ledger_id for ledger_id in kept if ledger_id < end]

    async def _read(self, end: int) -> None:
        read: list[tuple[int, list[bytes]]] = []

        def visit(first: int, values: list[bytes]) -> None:  # in a reader thread
            read.append((first, values))

        reached = await self._scanner.scan(self._topic, self._read_to, end, visit)
        for first, values in read:
            for offset, value in enumerate(values, first):
                if value:
                    purpose = formats.decode_ledger_id_allocation(value)
                    self._by_name.setdefault(purpose, []).append(offset)
        self._read_to = max(self._read_to, reached)
