"""The storage layer's entry point: Kafka clients, metadata tables and open managed ledgers.

One instance per broker process. It creates the internal topics when missing, loads
the compacted metadata topics to their end, and hands out managed ledgers (one open
instance per name; concurrent opens of the same name share it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError, TopicNotFoundError
from dedup_broker.name_locks import NameLocks
from dedup_broker.storage import formats
from dedup_broker.storage.api import LedgerDeleter, RecordSender, TopicCreator, WriteFence
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.common import max_record_bytes
from dedup_broker.storage.kafka.fencing import KafkaWriteFence
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.ledger.context import StorageContext
from dedup_broker.storage.ledger.deletion import DirectLedgerDeleter, targets_for
from dedup_broker.storage.ledger.entry_cache import EntryCache
from dedup_broker.storage.ledger.kafka_ledger import open_kafka_ledger
from dedup_broker.storage.ledger.ledger_store import LedgerStore
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl
from dedup_broker.storage.ledger.rollover import RolloverPolicy
from dedup_broker.storage.offload.filesystem import offload_directory, offloader_from_config
from dedup_broker.storage.tables.compacted_store import CompactedTopicStore
from dedup_broker.storage.tables.metadata_table import KafkaMetadataTable
from dedup_broker.storage.tables.table_tail import TableTail
from dedup_broker.storage.values import (
    COMPACTED_TOPIC_PROPERTY,
    CURSOR_KEY_SEPARATOR,
    LedgerState,
    LedgerStatus,
    LedgerType,
)

log = logging.getLogger(__name__)

TAIL_WAIT_SECONDS = 0.5
"""How long a metadata table's refresh waits for the tail before reading on its own."""

DeleterFactory = Callable[[BrokerConfig, TopicCreator, RecordSender], Awaitable[LedgerDeleter]]
"""Builds the ledger deleter from the storage's Kafka clients (two-phase deletion)."""


def internal_topics(config: BrokerConfig) -> dict[str, dict[str, str]]:
    """The broker's own topics and their configuration."""
    cluster = config.cluster_name
    compacted = {"cleanup.policy": "compact", "max.message.bytes": str(max_record_bytes(config))}
    return {
        formats.ledger_ids_topic(cluster): {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
        },
        formats.managed_ledgers_topic(cluster): compacted,
        formats.cursors_topic(cluster): compacted,
        formats.policies_topic(cluster): compacted,
        # A record per proof (hundreds a second under load): small segments that roll
        # every ten minutes, so an hour's retention keeps the partition small.
        formats.fences_topic(cluster): {
            "cleanup.policy": "delete",
            "retention.ms": "3600000",
            "segment.bytes": str(16 * 1024 * 1024),
            "segment.ms": "600000",
        },
    }


def internal_topic_partitions(config: BrokerConfig) -> dict[str, int]:
    """The internal topics of more than one partition. The fences topic has one per
    ownership slot: each slot's acknowledgements wait for its own partition, so the
    loss of the Kafka node leading it stalls that slot alone (a topic created with one
    partition by an earlier version grows at start)."""
    return {formats.fences_topic(config.cluster_name): config.cluster_ownership_slots}


class KafkaStorage:
    """Use :meth:`start` to create one."""

    def __init__(
        self,
        config: BrokerConfig,
        admin: KafkaAdmin,
        producer: SharedProducer,
        reader: KafkaReader,
    ) -> None:
        cluster = config.cluster_name
        self.config = config
        port = config.broker_service_port or config.broker_service_port_tls
        self.broker_id = f"{config.advertised_address}:{port}/{os.getpid()}"
        self._admin = admin
        self._producer = producer
        self._reader = reader
        self.ledger_store = LedgerStore(config, self.broker_id, producer, admin, reader)
        self.entry_cache = EntryCache(config.managed_ledger_cache_size_mb * 1024 * 1024)
        self._managed_ledger_infos = KafkaMetadataTable(
            formats.managed_ledgers_topic(cluster), producer, admin, reader
        )
        self._cursor_infos = KafkaMetadataTable(
            formats.cursors_topic(cluster), producer, admin, reader
        )
        self.policies = KafkaMetadataTable(formats.policies_topic(cluster), producer, admin, reader)
        self.offloader = offloader_from_config(config)
        self.compacted_topics = CompactedTopicStore(config, admin, producer, reader)
        self._on_ledger_closed = self._ledger_closed
        """One bound method for every managed ledger, not one made for each."""
        self._ctx = StorageContext(
            config=config,
            producer=producer,
            ledgers=self.ledger_store,
            cache=self.entry_cache,
            managed_ledger_infos=self._managed_ledger_infos,
            cursor_infos=self._cursor_infos,
            rollover=RolloverPolicy.from_config(config),
            deleter=DirectLedgerDeleter(self.ledger_store, self.offloader),
            offloader=self.offloader,
            broker_id=self.broker_id,
        )
        self._open: dict[str, ManagedLedgerImpl] = {}
        self._name_locks = NameLocks()
        self._closed = False
        self._tail = TableTail(config, asyncio.get_running_loop())

    def _follow_tables(self) -> None:
        """From here on a refresh of a table asks Kafka for its end and waits for the tail."""
        tables = [self._managed_ledger_infos, self._cursor_infos, self.policies]
        self._tail.follow(tables)
        for table in tables:
            table.tail_wait_seconds = TAIL_WAIT_SECONDS

    @classmethod
    async def start(
        cls, config: BrokerConfig, deleter_factory: DeleterFactory | None = None
    ) -> KafkaStorage:
        """Create missing internal topics and load the metadata tables.

        ``deleter_factory`` builds the ledger deleter (default: direct deletion).
        """
        offload_directory(config)  # a ConfigError fails the start before Kafka is touched
        admin = KafkaAdmin(config)
        topics = internal_topics(config)
        partitions = internal_topic_partitions(config)
        await asyncio.gather(
            *(
                admin.create_topic_when_ready(topic, conf, partitions.get(topic, 1))
                for topic, conf in topics.items()
            )
        )
        for topic, count in partitions.items():
            await admin.grow_partitions(topic, count)
        producer = SharedProducer(config, asyncio.get_running_loop())
        reader = KafkaReader(config)
        service = cls(config, admin, producer, reader)
        try:
            await asyncio.gather(
                service._managed_ledger_infos.refresh(),
                service._cursor_infos.refresh(),
                service.policies.refresh(),
            )
            if deleter_factory is not None:
                deleter = await deleter_factory(config, admin, producer)
                service._ctx = dataclasses.replace(service._ctx, deleter=deleter)
            service._follow_tables()
        except BaseException:
            await asyncio.to_thread(service._tail.close)
            await producer.close()
            await asyncio.to_thread(reader.close)
            raise
        log.info(
            "storage started on %s: %d managed ledgers, %d cursors",
            config.kafka_bootstrap_servers,
            len(service._managed_ledger_infos),
            len(service._cursor_infos),
        )
        return service

    async def close(self, timeout_seconds: float | None = None) -> None:
        """Close every open managed ledger (storing cursors), then the Kafka clients.

        Bounded by ``timeout_seconds`` when given: what Kafka has not acknowledged by
        then is dropped (nothing unacknowledged was confirmed to anyone)."""
        if self._closed:
            return
        self._closed = True
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        closing = asyncio.gather(
            *(ledger.close() for ledger in list(self._open.values())), return_exceptions=True
        )
        try:
            results = await asyncio.wait_for(closing, _remaining(deadline))
        except TimeoutError:
            log.warning("managed ledgers still closing at the shutdown deadline; abandoned")
            results = []
        for result in results:
            if isinstance(result, BaseException):
                log.warning("closing a managed ledger failed: %s", result)
        await asyncio.to_thread(self._tail.close)
        await self._producer.close(_remaining(deadline))
        await asyncio.to_thread(self._reader.close)

    # --- managed ledgers ------------------------------------------------------------
    def _check_running(self) -> None:
        if self._closed:
            raise StorageError("the storage service is closed")

    async def acquire_fence(self, slot: int) -> KafkaWriteFence:
        """Take ``slot``'s write fence (fencing every earlier holder); see fencing.py."""
        self._check_running()
        return await KafkaWriteFence.acquire(self.config, slot)

    async def open_managed_ledger(
        self, name: str, create: bool = True, fence: WriteFence | None = None
    ) -> ManagedLedgerImpl:
        """The open managed ledger ``name``, opening (and, if allowed, creating) it.

        With ``fence``, its acknowledgements and metadata writes go through the fence."""
        self._check_running()
        if not name or CURSOR_KEY_SEPARATOR in name:
            raise ValueError(f"invalid managed ledger name {name!r}")
        ledger = self._open.get(name)
        if ledger is not None and not ledger.closing:
            return self._same_fence(ledger, fence)
        async with self._name_locks.hold(name):
            ledger = self._open.get(name)
            if ledger is not None and ledger.closing:
                # An unload under way: a client reconnecting at once gets the ledger opened
                # afresh after the close recorded its end, never the one being closed.
                await ledger.closed()
                ledger = self._open.get(name)
            if ledger is not None:
                return self._same_fence(ledger, fence)
            self._check_running()
            # Another broker may have written since this one loaded the tables.
            await asyncio.gather(self._managed_ledger_infos.refresh(), self._cursor_infos.refresh())
            if not create and self._managed_ledger_infos.get(name) is None:
                raise TopicNotFoundError(f"managed ledger {name} does not exist")
            ledger = await open_kafka_ledger(name, self._ctx, self._on_ledger_closed, fence)
            self._open[name] = ledger
            return ledger

    @staticmethod
    def _same_fence(ledger: ManagedLedgerImpl, fence: WriteFence | None) -> ManagedLedgerImpl:
        if ledger.fence is not fence:
            raise StorageError(f"managed ledger {ledger.name} is open under another write fence")
        return ledger

    def _ledger_closed(self, ledger: ManagedLedgerImpl) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]

    def managed_ledger_exists(self, name: str) -> bool:
        return name in self._open or self._managed_ledger_infos.get(name) is not None

    def list_managed_ledgers(self) -> list[str]:
        stored = {name for name, _ in self._managed_ledger_infos.items()}
        return sorted(stored | set(self._open))

    @property
    def producer(self) -> SharedProducer:
        return self._producer

    @property
    def admin(self) -> KafkaAdmin:
        return self._admin

    @property
    def deleter(self) -> LedgerDeleter:
        return self._ctx.deleter

    async def ledger_status(
        self, name: str, ledger_id: int, ledger_type: LedgerType = LedgerType.LEDGER, uid: str = ""
    ) -> LedgerStatus:
        """Whether a deletion worker may delete a copy of ``ledger_id`` of managed ledger
        ``name`` (the Kafka copy, ``LEDGER``, or the offloaded copy ``uid``,
        ``OFFLOAD_LEDGER``): in use, pending (being changed, not stored yet: ask again)
        or deletable."""
        if self._ctx.pending_deletions.holds(name, ledger_id):
            return LedgerStatus.PENDING
        ledger = self._open.get(name)
        if ledger is not None and ledger.state != LedgerState.CLOSED:
            return ledger.trimmer.status(ledger_id, ledger_type, uid)
        await self._managed_ledger_infos.refresh()
        stored = self._managed_ledger_infos.get(name)
        listed = (
            [
                i
                for i in formats.decode_managed_ledger_info(stored).ledgers
                if i.ledger_id == ledger_id
            ]
            if stored is not None
            else []
        )
        if not listed:
            return LedgerStatus.DELETABLE
        info = listed[0]
        if ledger_type is LedgerType.OFFLOAD_LEDGER:
            if info.offload is not None and info.offload.uid == uid:
                return LedgerStatus.IN_USE
            return LedgerStatus.DELETABLE
        if info.offloaded and not info.in_kafka:
            return LedgerStatus.DELETABLE
        return LedgerStatus.IN_USE

    async def delete_managed_ledger(self, name: str) -> None:
        """Close ``name``; secure the deletion of its ledgers (the deleter's ``mark``),
        remove its cursors and info, then let the deleter finish."""
        self._check_running()
        async with self._name_locks.hold(name):
            ledger = self._open.get(name)
            if ledger is not None:
                await ledger.close()
            await asyncio.gather(self._managed_ledger_infos.refresh(), self._cursor_infos.refresh())
            stored = self._managed_ledger_infos.get(name)
            cursor_keys = [
                key for key, _ in self._cursor_infos.items(formats.cursor_key_prefix(name))
            ]
            if stored is None and not cursor_keys:
                raise TopicNotFoundError(f"managed ledger {name} does not exist")
            record = formats.decode_managed_ledger_info(stored) if stored is not None else None
            infos = record.ledgers if record is not None else []
            companion = record.properties.get(COMPACTED_TOPIC_PROPERTY) if record else None
            ledger_ids = [info.ledger_id for info in infos]
            targets = targets_for(name, infos)
            with self._ctx.pending_deletions.during(name, ledger_ids):
                accepted = await self._ctx.deleter.mark(targets)
                if not set(ledger_ids) <= accepted:
                    raise StorageError(
                        f"deleting {name}: the deletion of ledgers "
                        f"{sorted(set(ledger_ids) - accepted)} could not be recorded"
                    )
                for key in cursor_keys:
                    await self._cursor_infos.delete(key)
                if stored is not None:
                    await self._managed_ledger_infos.delete(name)
            self.entry_cache.invalidate_ledgers(ledger_ids)
            await self._ctx.deleter.after_metadata(targets)
            if companion is not None:
                await self._delete_companion(name, companion)
            log.info("deleted managed ledger %s; ledgers %s", name, ledger_ids)

    async def _delete_companion(self, name: str, topic: str) -> None:
        """The compacted view goes with its topic (``dedup-broker doctor`` reports one a
        crash left behind)."""
        try:
            await self.compacted_topics.delete(topic)
        except StorageError as exc:
            log.error("deleting %s: its compacted topic %s is left behind: %s", name, topic, exc)

    # --- for tools and tests --------------------------------------------------------
    @property
    def open_managed_ledgers(self) -> dict[str, ManagedLedgerImpl]:
        return dict(self._open)

    async def refresh(self) -> None:
        """Re-read every metadata table to its current end."""
        await asyncio.gather(
            self._managed_ledger_infos.refresh(),
            self._cursor_infos.refresh(),
            self.policies.refresh(),
        )


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), 0.1)
