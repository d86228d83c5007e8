"""A compacted metadata table (``MetadataTable``) in memory, for tests without Kafka."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from dedup_broker.storage.metadata_table import MetadataTable


class MemoryTable:
    """The table's reads and writes over a dict; a write yields once, as a round trip.

    Controls: ``gate`` holds writes until set, ``failure`` fails them; ``writes`` lists
    the writes that succeeded, tombstones as ``None``.
    """

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}
        self.writes: list[tuple[str, bytes | None]] = []
        self.gate: asyncio.Event | None = None
        self.failure: BaseException | None = None
        self.writes_in_progress = 0
        self.max_writes_in_progress = 0

    def get(self, key: str) -> bytes | None:
        return self._values.get(key)

    def items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        return sorted((k, v) for k, v in self._values.items() if k.startswith(prefix))

    def __len__(self) -> int:
        return len(self._values)

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
        if value is None:
            self._values.pop(key, None)
        else:
            self._values[key] = value
        self.writes.append((key, value))

    def as_metadata_table(self) -> MetadataTable:
        return cast("MetadataTable", self)
