"""Compaction of one topic (Pulsar's ``PUT .../compaction`` and ``read_compacted``).

A run reads the topic from the compaction horizon to its current end and stores the
latest message of every key it saw in the companion topic (an empty payload or a
``null_value`` message stores a tombstone: the key is gone). Then the ``__compaction``
cursor, durable like any subscription, moves to the new horizon. So:

- the cursor holds back trimming of what is not compacted yet (retention covers it);
- a crash mid-run leaves companion records beyond the stored horizon, which readers
  ignore (they read those positions from the topic) and a rerun writes again;
- messages without a key are left out, unless ``topicCompactionRetainNullKey``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from dedup_broker.compaction.records import CompactedMessage, MalformedCompactedRecordError
from dedup_broker.compaction.view import CompactedView
from dedup_broker.errors import BrokerError, RetriableError
from dedup_broker.lazy import LazyLock
from dedup_broker.protocol.batch import is_batch, split_batch
from dedup_broker.protocol.framing import parse_message
from dedup_broker.storage.api import (
    COMPACTED_TOPIC_PROPERTY,
    COMPACTION_CURSOR,
    Entry,
    FetchedRecord,
    Position,
    readable_end,
)

if TYPE_CHECKING:
    from dedup_broker.storage.api import ManagedCursor, ManagedLedger

log = logging.getLogger(__name__)

_READ_ENTRIES = 500
_NO_HORIZON = Position(-1, -1)


class CompactionStatus(Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionInProgressError(RetriableError):
    """A compaction of the topic is running already."""


class CompanionTopics(Protocol):
    """Where compacted data lives (``storage.compacted_store``)."""

    def new_topic_name(self) -> str: ...
    async def ensure(self, topic: str) -> None: ...
    async def write(self, topic: str, records: list[tuple[bytes, bytes | None]]) -> None: ...
    async def read_all(self, topic: str) -> list[FetchedRecord]: ...


class TopicCompaction:
    __slots__ = (
        "_companions",
        "_hidden",
        "_ledger",
        "_retain_null_key",
        "_task",
        "_view",
        "_view_lock",
        "last_error",
        "last_succeeded_ms",
        "status",
    )

    def __init__(
        self,
        ledger: ManagedLedger,
        companions: CompanionTopics,
        retain_null_key: bool,
        hidden: Callable[[bytes], bool] = lambda data: False,
    ) -> None:
        self._ledger = ledger
        self._hidden = hidden
        """Entries readers never receive (transactions' markers and aborted messages)."""
        self._companions = companions
        self._retain_null_key = retain_null_key
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.last_succeeded_ms = 0
        self._task: asyncio.Task[None] | None = None
        self._view: CompactedView | None = None
        self._view_lock = LazyLock()

    # --- state ------------------------------------------------------------------------
    @property
    def compacted(self) -> bool:
        """Compacted at least once (its cursor exists)."""
        return self._ledger.cursors.exists(COMPACTION_CURSOR)

    def horizon(self) -> Position:
        cursor = self._ledger.cursors.opened().get(COMPACTION_CURSOR)
        return cursor.mark_delete_position if cursor is not None else _NO_HORIZON

    async def _open_cursor(self) -> ManagedCursor | None:
        """The ``__compaction`` cursor, loaded from storage if the topic has one."""
        if not self.compacted:
            return None
        return await self._ledger.cursors.open(COMPACTION_CURSOR)

    async def uncompacted_bytes(self) -> int:
        """An estimate of the bytes after the horizon (what the next run would read)."""
        ledger = self._ledger
        total, entries = ledger.total_size, ledger.number_of_entries()
        if entries <= 0:
            return 0
        cursor = await self._open_cursor()
        pending = entries if cursor is None else cursor.backlog()
        return total * pending // entries

    # --- running ------------------------------------------------------------------------
    async def check_threshold(self, threshold: int) -> None:
        """Start a run when more than ``threshold`` bytes are uncompacted (0: never)."""
        if threshold <= 0 or self.status is CompactionStatus.RUNNING:
            return
        if await self.uncompacted_bytes() > threshold:
            log.info("%s: over the compaction threshold (%d bytes)", self._ledger.name, threshold)
            self.trigger()

    def trigger(self) -> None:
        """Start a run in the background; :attr:`status` tells how it went."""
        if self.status is CompactionStatus.RUNNING:
            raise CompactionInProgressError(f"{self._ledger.name}: compaction already in progress")
        self.status, self.last_error = CompactionStatus.RUNNING, ""
        self._task = asyncio.get_running_loop().create_task(self._run_reporting())

    async def run(self) -> None:
        """One run, waited for (tests, and the trigger's background task)."""
        cursor = await self._ledger.cursors.open(COMPACTION_CURSOR, "earliest")
        topic = await self._companion_topic()
        end = readable_end(self._ledger)  # open transactions lie beyond
        start = self._ledger.next_position(cursor.mark_delete_position)
        latest: dict[bytes, CompactedMessage | None] = {}
        while start <= end:
            entries = await self._ledger.read_entries(start, _READ_ENTRIES)
            entries = [e for e in entries if e.position <= end]
            if not entries:
                break
            for entry in entries:
                if not self._hidden(entry.data):
                    self._fold(entry, latest)
            start = self._ledger.next_position(entries[-1].position)
        await self._companions.ensure(topic)
        await self._companions.write(
            topic, [(key, m.encode() if m else None) for key, m in latest.items()]
        )
        if end > cursor.mark_delete_position:
            cursor.mark_delete(end)
            await cursor.flush()
        self._view = None
        self.last_succeeded_ms = int(time.time() * 1000)
        log.info("%s: compacted up to %s (%d keys changed)", self._ledger.name, end, len(latest))

    async def _run_reporting(self) -> None:
        try:
            await self.run()
            self.status = CompactionStatus.SUCCESS
        except asyncio.CancelledError:
            self.status, self.last_error = CompactionStatus.ERROR, "cancelled"
            raise
        except Exception as exc:
            self.status, self.last_error = CompactionStatus.ERROR, str(exc)
            log.warning("%s: compaction failed: %s", self._ledger.name, exc)

    async def _companion_topic(self) -> str:
        """The companion's name, stored with the managed ledger before it is created."""
        properties = self._ledger.properties
        name = properties.get(COMPACTED_TOPIC_PROPERTY)
        if name is None:
            name = self._companions.new_topic_name()
            properties[COMPACTED_TOPIC_PROPERTY] = name
            await self._ledger.set_properties(properties)
        return name

    def _fold(self, entry: Entry, latest: dict[bytes, CompactedMessage | None]) -> None:
        try:
            parsed = parse_message(entry.data)
            messages = split_batch(parsed.metadata, parsed.payload)
        except BrokerError as exc:
            log.warning("%s: entry %s left out of compaction: %s", self._ledger.name, entry, exc)
            return
        metadata = parsed.metadata
        batched = is_batch(metadata)
        entry_metadata = b""
        for index, message in enumerate(messages):
            single = message.metadata
            if single.HasField("partition_key"):
                key = b"k" + single.partition_key.encode()
            elif self._retain_null_key:
                key = b"p%d:%d:%d" % (entry.position.ledger_id, entry.position.entry_id, index)
            else:
                continue
            if single.null_value or not message.payload:
                latest[key] = None
                continue
            if not entry_metadata:
                entry_metadata = metadata.SerializeToString()
            latest[key] = CompactedMessage(
                entry.position,
                index if batched else -1,
                len(messages) if batched else 0,
                entry_metadata,
                single.SerializeToString() if batched else b"",
                message.payload,
            )

    # --- reading ------------------------------------------------------------------------
    async def view(self) -> CompactedView | None:
        """The compacted view up to the horizon; None if the topic was never compacted."""
        if await self._open_cursor() is None:
            return None
        async with self._view_lock:
            if self._view is None:
                self._view = await self._load_view()
            return self._view

    async def _load_view(self) -> CompactedView:
        horizon = self.horizon()
        topic = self._ledger.properties.get(COMPACTED_TOPIC_PROPERTY)
        if topic is None:
            return CompactedView(horizon, [])
        await self._companions.ensure(topic)
        latest: dict[bytes, CompactedMessage | None] = {}
        for record in await self._companions.read_all(topic):
            if record.key is None:
                continue
            if record.value is None:
                latest[record.key] = None
                continue
            try:
                latest[record.key] = CompactedMessage.decode(record.value)
            except MalformedCompactedRecordError as exc:
                log.warning("%s: skipping a compacted record: %s", self._ledger.name, exc)
        return CompactedView(horizon, (m for m in latest.values() if m is not None))

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def stats(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "lastError": self.last_error,
            "lastCompactionSucceedTimestamp": self.last_succeeded_ms,
            "horizon": str(self.horizon()),
        }
