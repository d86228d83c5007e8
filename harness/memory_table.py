"""A compacted metadata table (``KafkaMetadataTable``) in memory, for tests without Kafka."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dedup_broker.storage.tables.metadata_table import TableValues

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable


class MemoryTable(TableValues):
    """The table's reads and writes over a dict; a write yields once, as a round trip.

    Controls: ``gate`` holds writes until set, ``failure`` fails them; ``writes`` lists
    the writes that succeeded, tombstones as ``None``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, bytes | None]] = []
        self.gate: asyncio.Event | None = None
        self.failure: BaseException | None = None
        self.writes_in_progress = 0
        self.max_writes_in_progress = 0

    async def refresh(self) -> None:
        """Nothing to catch up with: no other writer shares this table."""

    async def put(self, key: str, value: bytes) -> None:
        await self._write(key, value)

    async def delete(self, key: str) -> None:
        await self._write(key, None)

    async def _write(self, key: str, value: bytes | None) -> None:
        self.writes_in_progress += 1
        self.max_writes_in_progress = max(self.max_writes_in_progress, self.writes_in_progress)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)  # the round trip to Kafka
            if self.failure is not None:
                raise self.failure
        finally:
            self.writes_in_progress -= 1
        self._set(key, value)
        self.writes.append((key, value))

    def as_metadata_table(self) -> MetadataTable:
        return self
