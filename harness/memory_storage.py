"""The storage the broker domain uses, in memory: for fast tests without Kafka.

``MemoryStorage`` stands in for ``KafkaStorage`` and ``MemoryLedger``
(``memory_ledger.py``) for ``ManagedLedger``, limited to what topics, subscriptions and
deduplication call. What Kafka does is modelled here; everything above it is the real
code: position arithmetic is ``LedgerList``, cursors are ``ManagedCursor`` opened and
stored by ``CursorRegistry`` in an in-memory cursor table. A restart
(``MemoryStorage.restarted``) sees only what was stored: acknowledged (or landed)
entries, the cursor states last written, the policies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from itertools import count
from typing import TYPE_CHECKING

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, TopicNotFoundError
from dedup_broker.storage import formats
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl
from dedup_broker.storage.values import FetchedRecord
from harness.memory_ledger import KafkaLedgers, MemoryLedger
from harness.memory_table import MemoryTable

if TYPE_CHECKING:
    from dedup_broker.storage.api import StorageService


class MemoryCompactedTopics:
    """Companion topics of compacted topics: records in write order, as Kafka keeps them
    before its cleaner runs."""

    def __init__(self) -> None:
        self.topics: dict[str, list[FetchedRecord]] = {}
        self._names = count(1)

    def new_topic_name(self) -> str:
        return f"memory.compacted.{next(self._names)}"

    async def ensure(self, topic: str) -> None:
        self.topics.setdefault(topic, [])

    async def write(self, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
        await asyncio.sleep(0)
        stored = self.topics[topic]
        for key, value in records:
            stored.append(FetchedRecord(len(stored), key, value, 0, ()))

    async def read_all(self, topic: str) -> list[FetchedRecord]:
        await asyncio.sleep(0)
        return list(self.topics.get(topic, []))


class MemoryStorage:
    """``KafkaStorage`` in memory: managed ledgers by name, the cursor and policies
    tables. ``open_failure``, when set, fails every opening of a managed ledger."""

    def __init__(self, config: BrokerConfig | None = None, first_ledger_id: int = 1) -> None:
        self.config = config or BrokerConfig()
        self.policies = MemoryTable()
        self.cursor_infos = MemoryTable()
        self.open_failure: BaseException | None = None
        self._kafka: dict[str, KafkaLedgers] = {}
        self.ledger_properties: dict[str, dict[str, str]] = {}
        """Each managed ledger's stored properties, by name."""
        self._ledger_ids: Iterator[int] = count(first_ledger_id)
        self._open: dict[str, MemoryLedger] = {}
        self._closed = False
        self.compacted_topics = MemoryCompactedTopics()

    def as_service(self) -> StorageService:
        """This object where the code under test expects the real service."""
        return self

    def restarted(self) -> MemoryStorage:
        """The stored data as a fresh broker process sees it: no managed ledger open, no
        state that was only in memory. The previous instance must not be used after."""
        fresh = MemoryStorage(self.config)
        fresh.policies, fresh.cursor_infos = self.policies, self.cursor_infos
        fresh._kafka, fresh._ledger_ids = self._kafka, self._ledger_ids
        fresh.ledger_properties = self.ledger_properties
        fresh.compacted_topics = self.compacted_topics
        return fresh

    def new_ledger_id(self) -> int:
        return next(self._ledger_ids)

    # --- managed ledgers ------------------------------------------------------------
    def ledger(self, name: str) -> MemoryLedger:
        """The open managed ledger ``name``, opened (or created) at once."""
        if self._closed:
            raise StorageError("the storage service is closed")
        ledger = self._open.get(name)
        if ledger is None:
            ledger = MemoryLedger(name, self, self._kafka.setdefault(name, {}))
            self._open[name] = ledger
        return ledger

    async def open_managed_ledger(
        self, name: str, create: bool = True, fence: object | None = None
    ) -> MemoryLedger:
        await asyncio.sleep(0)  # reading the metadata tables
        if self.open_failure is not None:
            raise self.open_failure
        if not create and name not in self._kafka:
            raise TopicNotFoundError(f"managed ledger {name} does not exist")
        return self.ledger(name)

    def ledger_closed(self, ledger: ManagedLedgerImpl) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]

    def managed_ledger_exists(self, name: str) -> bool:
        return name in self._kafka

    def list_managed_ledgers(self) -> list[str]:
        return sorted(self._kafka)

    async def delete_managed_ledger(self, name: str) -> None:
        ledger = self._open.get(name)
        if ledger is not None:
            await ledger.close()
        prefix = formats.cursor_key_prefix(name)
        cursor_keys = [key for key, _ in self.cursor_infos.items(prefix)]
        if name not in self._kafka and not cursor_keys:
            raise TopicNotFoundError(f"managed ledger {name} does not exist")
        for key in cursor_keys:
            await self.cursor_infos.delete(key)
        self._kafka.pop(name, None)

    @property
    def open_managed_ledgers(self) -> dict[str, MemoryLedger]:
        return dict(self._open)

    async def refresh(self) -> None:
        """Nothing to catch up with: no other broker shares these tables."""

    async def close(self, timeout_seconds: float | None = None) -> None:
        self._closed = True
        for ledger in list(self._open.values()):
            await ledger.close()
