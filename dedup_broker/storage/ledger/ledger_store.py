"""Ledgers as single-partition Kafka topics: allocation, creation, sealing, reading, deletion.

A ledger's life on Kafka:

1. its id is the offset of an allocation record in ``{cluster}.ledger-ids`` (unique
   across brokers and restarts, never reused);
2. its topic ``{cluster}.ledger.{id}`` is created, and must not exist yet;
3. a header record (``LedgerMetadata``) is written at offset 0 and acknowledged before
   anyone records the ledger in a managed ledger's list;
4. entries follow at offsets 1.. (entry id = offset - 1), each keyed by the running size
   of the ledger's entry data;
5. when a broker must learn a ledger's end without having written it itself, the topic is
   sealed (Kafka refuses further writes) and its end offset read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, UnknownTopicError
from dedup_broker.storage import formats
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.common import max_record_bytes
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.ledger.id_allocations import AllocationIndex
from dedup_broker.storage.values import (
    Entry,
    EntryVisitor,
    LedgerHeaderError,
    LedgerInfo,
    LedgerMetadata,
    Position,
)

log = logging.getLogger(__name__)

HEADER_OFFSET = 0
FIRST_ENTRY_OFFSET = 1
_MAX_ID_COLLISIONS = 10
_HEADER_ATTEMPTS = 6
_HEADER_RETRY_FIRST_DELAY_S = 0.1


def now_ms() -> int:
    return int(time.time() * 1000)


class LedgerLookup:
    """What Kafka holds about ledgers, read only: id allocation records and headers."""

    def __init__(self, config: BrokerConfig, admin: KafkaAdmin, reader: KafkaReader) -> None:
        self._cluster = config.cluster_name
        self._admin = admin
        self._reader = reader
        self.ids_topic = formats.ledger_ids_topic(config.cluster_name)
        self._allocations = AllocationIndex(self.ids_topic, admin, reader)

    def topic(self, ledger_id: int) -> str:
        return formats.ledger_topic(self._cluster, ledger_id)

    async def read_metadata(self, ledger_id: int) -> LedgerMetadata | None:
        """The ledger's header; None if its topic holds no record at all (created, the
        header never written: a crash mid-create). LedgerHeaderError if its first record
        is not a ledger header."""
        topic = self.topic(ledger_id)
        if await self._admin.high_watermark(topic) == HEADER_OFFSET:
            return None
        records = await self._reader.fetch(topic, HEADER_OFFSET, FIRST_ENTRY_OFFSET)
        if not records or records[0].offset != HEADER_OFFSET or not records[0].value:
            raise LedgerHeaderError(f"ledger {ledger_id} holds no ledger header")
        header = dict(records[0].headers)
        if header.get(formats.LEDGER_HEADER_KEY) != formats.LEDGER_HEADER_VALUE:
            raise LedgerHeaderError(f"ledger {ledger_id}: offset 0 is not a ledger header")
        try:
            return formats.decode_ledger_metadata(records[0].value)
        except (DecodeError, ValueError) as exc:
            raise LedgerHeaderError(f"ledger {ledger_id}: unreadable header: {exc}") from None

    async def allocated_to(self, managed_ledger_name: str, after_id: int) -> list[int]:
        """Ids allocated for ``managed_ledger_name`` after ``after_id`` (allocation records)."""
        return await self._allocations.allocated_to(managed_ledger_name, after_id)

    async def allocation_of(self, ledger_id: int) -> str | None:
        """The managed ledger name ``ledger_id`` was allocated for; None if never allocated."""
        if ledger_id < 0 or ledger_id >= await self._admin.high_watermark(self.ids_topic):
            return None
        records = await self._reader.fetch(self.ids_topic, ledger_id, ledger_id + 1)
        if not records or records[0].offset != ledger_id or records[0].value is None:
            return None
        return formats.decode_ledger_id_allocation(records[0].value)


class LedgerStore(LedgerLookup):
    def __init__(
        self,
        config: BrokerConfig,
        broker_id: str,
        producer: SharedProducer,
        admin: KafkaAdmin,
        reader: KafkaReader,
    ) -> None:
        super().__init__(config, admin, reader)
        self.broker_id = broker_id
        self._producer = producer
        self._topic_config = {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "max.message.bytes": str(max_record_bytes(config)),
            "message.timestamp.type": "CreateTime",
        }

    # --- creation -------------------------------------------------------------------
    async def allocate_id(self, purpose: str) -> int:
        value = formats.encode_ledger_id_allocation(self.broker_id, now_ms(), purpose)
        # One partition: its offsets are the cluster-wide sequence of ledger ids.
        return await self._producer.send(self.ids_topic, value, partition=0)

    async def create(
        self, managed_ledger_name: str, component: str = "MANAGED_LEDGER", cursor_name: str = ""
    ) -> int:
        """A new, empty ledger whose header is stored; returns its id."""
        for _ in range(_MAX_ID_COLLISIONS):
            ledger_id = await self.allocate_id(managed_ledger_name)
            topic = self.topic(ledger_id)
            if not await self._admin.create_topic(topic, self._topic_config):
                # Only possible if the id topic was recreated: never write into it.
                log.error("ledger topic %s already exists; allocating another id", topic)
                continue
            created = now_ms()
            header = formats.encode_ledger_metadata(
                LedgerMetadata(
                    ledger_id=ledger_id,
                    managed_ledger_name=managed_ledger_name,
                    component=component,
                    cursor_name=cursor_name,
                    created_ms=created,
                    created_by=self.broker_id,
                )
            )
            offset = await self._write_header(ledger_id, header, created)
            if offset != HEADER_OFFSET:
                raise StorageError(f"ledger {ledger_id}: header stored at offset {offset}")
            log.info("created ledger %d for %s", ledger_id, managed_ledger_name)
            return ledger_id
        raise StorageError(f"could not allocate a fresh ledger id for {managed_ledger_name}")

    async def _write_header(self, ledger_id: int, header: bytes, created_ms: int) -> int:
        """Write the header into the ledger's new topic; its offset.

        Kafka answers CreateTopics once its controller recorded the topic; the partition's
        leader may learn of it a moment later and until then refuses writes as to an
        unknown topic (seen with thousands of topics on one Kafka). Such a refusal stored
        nothing, so the header is written again after a short pause."""
        delay = _HEADER_RETRY_FIRST_DELAY_S
        for attempt in range(1, _HEADER_ATTEMPTS + 1):
            try:
                return await self._producer.send(
                    self.topic(ledger_id),
                    header,
                    timestamp_ms=created_ms,
                    headers=[(formats.LEDGER_HEADER_KEY, formats.LEDGER_HEADER_VALUE)],
                )
            except UnknownTopicError as exc:
                if attempt == _HEADER_ATTEMPTS:
                    raise
                log.info("ledger %d: %s; writing its header again", ledger_id, exc)
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    # --- recovery -------------------------------------------------------------------
    async def close_at_true_end(self, ledger_id: int, verified: int = 0) -> LedgerInfo:
        """Seal the ledger and describe it as closed where Kafka really ends it: after the
        run of records, from the first on, that sit at the places they were sent to.

        A write that timed out leaves a gap, the records sent after it land early, and the
        producer's retry may write some twice: a gap and as many duplicates cancel out, so
        neither the last record nor a bisection can tell where the run ends; each record
        from the start is read (keys only). ``verified``: leading entries known to be in
        place (Kafka acknowledged them at their offsets to this broker), not read again.
        """
        topic = self.topic(ledger_id)
        await self._admin.seal_topic(topic)
        end = await self._admin.high_watermark(topic)
        entries, size = await self._run_in_place(topic, verified, end)
        if entries < end - FIRST_ENTRY_OFFSET:
            log.warning(
                "ledger %d: the record after entry %d is not the entry sent there (a write "
                "that failed left a gap); the ledger ends there, %d record(s) after it are "
                "not part of it",
                ledger_id,
                entries - 1,
                end - FIRST_ENTRY_OFFSET - entries,
            )
        log.info("ledger %d closed at its end in Kafka: %d entries", ledger_id, entries)
        return LedgerInfo(ledger_id, entries, size, now_ms())

    async def _run_in_place(self, topic: str, verified: int, end: int) -> tuple[int, int]:
        """(entries, size) of the records from the first on that each hold the entry sent
        to their offset, ending at the first that does not (or at ``end``)."""
        # The last verified record is read again for the size the ledger has up to it.
        first = FIRST_ENTRY_OFFSET + max(verified - 1, 0)
        expected = first
        size = 0

        def in_place(offset: int, raw_key: bytes | None) -> bool:
            nonlocal expected, size
            key = formats.decode_entry_key(raw_key)
            if offset != expected or key is None:
                return False
            if key.entry_id is not None and key.entry_id != offset - FIRST_ENTRY_OFFSET:
                return False
            expected, size = offset + 1, key.cumulative_size
            return True

        await self._reader.scan_keys(topic, first, end, in_place)
        return expected - FIRST_ENTRY_OFFSET, size

    async def ends_after(self, ledger_id: int, entries: int) -> bool:
        """Kafka holds exactly the header and ``entries`` records in the ledger's topic (a
        closed ledger nothing was written into after its close). False if unknown."""
        try:
            end = await self._admin.high_watermark(self.topic(ledger_id))
        except StorageError as exc:
            log.info("ledger %d: its end is unknown (%s)", ledger_id, exc)
            return False
        return end == FIRST_ENTRY_OFFSET + entries

    # --- reads ----------------------------------------------------------------------
    async def read(
        self, ledger_id: int, first_entry: int, count: int, max_bytes: int | None
    ) -> list[Entry]:
        start = first_entry + FIRST_ENTRY_OFFSET
        records = await self._reader.fetch(self.topic(ledger_id), start, start + count, max_bytes)
        entries = []
        for record in records:
            position = Position(ledger_id, record.offset - FIRST_ENTRY_OFFSET)
            entries.append(Entry(position, record.value or b"", record.timestamp_ms))
        return entries

    async def scan(self, ledger_id: int, first_entry: int, count: int, visit: EntryVisitor) -> int:
        """Hands entries ``first_entry..`` (at most ``count``) to ``visit`` in a worker
        thread; returns the id of the last one handed (``first_entry - 1`` if none)."""
        start = first_entry + FIRST_ENTRY_OFFSET

        def values(first_offset: int, data: list[bytes]) -> None:
            visit(ledger_id, first_offset - FIRST_ENTRY_OFFSET, data)

        end = await self._reader.scan(self.topic(ledger_id), start, start + count, values)
        return end - 1 - FIRST_ENTRY_OFFSET

    async def first_offsets_at_or_after(
        self, ledger_ids: list[int], timestamp_ms: int
    ) -> dict[int, int]:
        """Per ledger: entry id of the first record with timestamp >= ``timestamp_ms``
        (the header counts as entry 0), or -1 if there is none."""
        topics = {self.topic(ledger_id): ledger_id for ledger_id in ledger_ids}
        offsets = await self._admin.offsets_for_time(list(topics), timestamp_ms)
        return {
            topics[topic]: (max(offset - FIRST_ENTRY_OFFSET, 0) if offset >= 0 else -1)
            for topic, offset in offsets.items()
        }

    # --- deletion -------------------------------------------------------------------
    async def delete(self, ledger_ids: Iterable[int]) -> None:
        await self._admin.delete_topics([self.topic(ledger_id) for ledger_id in ledger_ids])
