"""A compacted Kafka topic held in memory as a key -> value table.

The topic is the truth and the dictionary a view of it: writes go to Kafka first and
show in the view once Kafka acknowledged them; :meth:`KafkaMetadataTable.refresh` reads
whatever other writers (other broker processes) added since. The topic is read in
offset order, each record once; a write of this view that shows before the reading
reaches it keeps its offset until then, so a record can never replace a newer one,
whichever way (own write or reading) it reaches the view first. A null value (tombstone)
deletes.

One partition: every broker loads the whole table anyway, and one partition keeps a
single order of writes.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from typing import Protocol

from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.values import FetchedRecord

log = logging.getLogger(__name__)

TABLE_PARTITION = 0


class TableValues:
    """A table's current entries, key -> value: what every table answers reads from (the
    in-memory table of the unit tests too).

    The keys are also kept sorted, so that the entries under a prefix (one managed
    ledger's cursors) are found without a pass over the whole table: with thousands of
    topics, each topic's periodic trim asked for its cursors, and a pass per topic made
    the event loop busy for minutes."""

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}
        self._sorted_keys: list[str] = []

    def get(self, key: str) -> bytes | None:
        return self._values.get(key)

    def items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        """Current entries whose key starts with ``prefix``, sorted by key."""
        keys = self._sorted_keys
        found = []
        for index in range(bisect.bisect_left(keys, prefix), len(keys)):
            key = keys[index]
            if not key.startswith(prefix):
                break
            found.append((key, self._values[key]))
        return found

    def _set(self, key: str, value: bytes | None) -> None:
        """Store ``value`` under ``key``; ``None`` removes the key."""
        if value is None:
            if self._values.pop(key, None) is not None:
                del self._sorted_keys[bisect.bisect_left(self._sorted_keys, key)]
            return
        if key not in self._values:
            bisect.insort(self._sorted_keys, key)
        self._values[key] = value

    def __len__(self) -> int:
        return len(self._values)


class MetadataView(TableValues):
    """The table read only: what Kafka holds, as of the last :meth:`refresh`."""

    def __init__(self, topic: str, admin: KafkaAdmin, reader: KafkaReader) -> None:
        super().__init__()
        self.topic = topic
        self._admin = admin
        self._reader = reader
        self._written_ahead: dict[str, int] = {}
        """Keys written through this view at or past the reading's offset -> the write's
        offset (only those: a table of many keys keeps no offset per key)."""
        self._next_offset = 0
        self._refresh_lock = asyncio.Lock()
        self._refreshes_asked = 0
        self._refreshes_answered = 0
        """Refreshes asked for so far, and how many of them a finished read has covered."""
        self.tail_wait_seconds: float | None = None
        """Set while a :class:`TableTail` follows this table: how long a refresh waits for
        the tail to reach the table's end before reading on its own."""
        self._tail_moved = asyncio.Event()

    # --- reads ----------------------------------------------------------------------
    async def refresh(self) -> None:
        """Bring the view to the topic's current end (its last stable offset).

        Callers that ask while a refresh is under way share the next one: a refresh that
        began after a caller asked sees everything stored before it asked, which is all
        a refresh promises. Loading many topics at once then costs a few offset queries,
        not one (behind a lock) per caller. With a tail following the table, a refresh
        waits for the tail to reach the end; it reads the records itself only if the
        tail is late.
        """
        self._refreshes_asked += 1
        asked = self._refreshes_asked
        async with self._refresh_lock:
            if self._refreshes_answered >= asked:
                return
            covered = self._refreshes_asked
            if self.tail_wait_seconds is None or not await self._tail_reaches_end():
                await self._read_to_end()
            self._refreshes_answered = covered

    async def _read_to_end(self) -> None:
        # The last stable offset: records of a transaction still open stay unread
        # (and are read by a later refresh), never skipped.
        end = await self._admin.stable_end(self.topic, TABLE_PARTITION)
        while self._next_offset < end:
            records = await self._reader.fetch(
                self.topic, self._next_offset, end, partition=TABLE_PARTITION
            )
            if not records:
                break
            self._apply_records(records)
        self._passed(end)

    async def _tail_reaches_end(self) -> bool:
        """Whether the tail got to the table's current end in time."""
        assert self.tail_wait_seconds is not None
        end = await self._admin.stable_end(self.topic, TABLE_PARTITION)
        try:
            async with asyncio.timeout(self.tail_wait_seconds):
                while self._next_offset < end:
                    self._tail_moved.clear()
                    await self._tail_moved.wait()
        except TimeoutError:
            log.debug("%s: the tail is behind offset %d; reading it directly", self.topic, end)
            return False
        return True

    # --- fed by a TableTail -----------------------------------------------------------
    def tail_start(self) -> int:
        return self._next_offset

    def take_tail(self, records: list[FetchedRecord], position: int) -> None:
        before = self._next_offset
        self._apply_records(records)
        self._passed(position)
        if self._next_offset > before:
            self._tail_moved.set()

    def record_write(self, key: str, value: bytes | None, offset: int) -> None:
        """A write acknowledged at ``offset`` shows now (unless the reading passed it:
        then the view holds it, or a newer record of the key, already)."""
        if offset < self._next_offset:
            return
        written = self._written_ahead.get(key)
        if written is not None and offset <= written:
            return
        self._written_ahead[key] = offset
        self._set(key, value)

    def _apply_records(self, records: list[FetchedRecord]) -> None:
        """Records read from the topic, in offset order; those read before (by the tail
        or a refresh, which may overlap) are skipped."""
        for record in records:
            offset = record.offset
            if offset < self._next_offset:
                continue
            self._next_offset = offset + 1
            if record.key is None:
                continue
            key = record.key.decode("utf-8")
            written = self._written_ahead.get(key)
            if written is not None:
                if offset < written:
                    continue  # this view's own newer write shows already
                del self._written_ahead[key]
            self._set(key, record.value)

    def _passed(self, offset: int) -> None:
        """The reading is at ``offset``: writes before it are in the view as read."""
        if offset > self._next_offset:
            self._next_offset = offset
        if self._written_ahead:
            for key in [k for k, o in self._written_ahead.items() if o < self._next_offset]:
                del self._written_ahead[key]


class KafkaMetadataTable(MetadataView):
    """The table a broker reads and writes."""

    def __init__(
        self, topic: str, producer: SharedProducer, admin: KafkaAdmin, reader: KafkaReader
    ) -> None:
        super().__init__(topic, admin, reader)
        self._producer = producer

    async def put(self, key: str, value: bytes) -> None:
        """Store ``value``; returns once Kafka acknowledged it (raises StorageError if not)."""
        offset = await self._producer.send(
            self.topic, value, key=key.encode("utf-8"), partition=TABLE_PARTITION
        )
        self.record_write(key, value, offset)

    async def delete(self, key: str) -> None:
        """Write a tombstone for ``key``; returns once Kafka acknowledged it."""
        offset = await self._producer.send(
            self.topic, None, key=key.encode("utf-8"), partition=TABLE_PARTITION
        )
        self.record_write(key, None, offset)


class RecordSender(Protocol):
    def send(
        self, topic: str, value: bytes | None, *, key: bytes | None = None, partition: int = -1
    ) -> asyncio.Future[int]: ...


class WritesThrough:
    """A table whose writes go through ``sender`` (a write fence's transactions); reads
    and the shared view are the table's own."""

    __slots__ = ("_sender", "_table")

    def __init__(self, table: KafkaMetadataTable, sender: RecordSender) -> None:
        self._table = table
        self._sender = sender

    def get(self, key: str) -> bytes | None:
        return self._table.get(key)

    def items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        return self._table.items(prefix)

    def __len__(self) -> int:
        return len(self._table)

    async def refresh(self) -> None:
        await self._table.refresh()

    async def put(self, key: str, value: bytes) -> None:
        await self._write(key, value)

    async def delete(self, key: str) -> None:
        await self._write(key, None)

    async def _write(self, key: str, value: bytes | None) -> None:
        offset = await self._sender.send(
            self._table.topic, value, key=key.encode("utf-8"), partition=TABLE_PARTITION
        )
        self._table.record_write(key, value, offset)
