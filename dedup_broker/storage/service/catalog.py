"""One cluster's ledger metadata for processes that are not brokers.

A deletion worker checks an intent against what storage holds, and the doctor compares
ledger lists with the ledger topics that exist. Both go through :class:`KafkaLedgerCatalog`,
so the topic names and the record layout stay the storage layer's own. Every answer is
read from Kafka when asked (tables are refreshed first): nothing is cached for long,
because brokers change the lists at any time. The one write is deleting a ledger's topic.
"""

from __future__ import annotations

import asyncio

from dedup_broker.config import BrokerConfig
from dedup_broker.storage import formats
from dedup_broker.storage.formats import BROKERS_KEY, broker_urls
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.ledger.ledger_store import LedgerLookup
from dedup_broker.storage.tables.compacted_store import compacted_topic_prefix
from dedup_broker.storage.tables.metadata_table import MetadataView
from dedup_broker.storage.values import (
    COMPACTED_TOPIC_PROPERTY,
    LedgerHeaderError,
    LedgerInfo,
    LedgerMetadata,
)

__all__ = ["KafkaLedgerCatalog", "LedgerHeaderError", "LedgerMetadata"]


class KafkaLedgerCatalog:
    """Read-mostly access to the ledgers of ``config.cluster_name``; call :meth:`close`."""

    def __init__(self, config: BrokerConfig) -> None:
        self._cluster = config.cluster_name
        self._admin = KafkaAdmin(config)
        self._reader = KafkaReader(config)
        self._lookup = LedgerLookup(config, self._admin, self._reader)
        self._managed_ledgers = MetadataView(
            formats.managed_ledgers_topic(self._cluster), self._admin, self._reader
        )
        self._policies = MetadataView(
            formats.policies_topic(self._cluster), self._admin, self._reader
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._reader.close)

    # --- ledger lists ---------------------------------------------------------------
    async def stored_ledgers(self, managed_ledger_name: str) -> list[LedgerInfo] | None:
        """The ledger list stored for the managed ledger; None if it does not exist."""
        await self._managed_ledgers.refresh()
        stored = self._managed_ledgers.get(managed_ledger_name)
        return None if stored is None else formats.decode_managed_ledger_info(stored).ledgers

    async def managed_ledgers(self) -> dict[str, list[LedgerInfo]]:
        """Every managed ledger of the cluster with its stored ledger list."""
        await self._managed_ledgers.refresh()
        return {
            name: formats.decode_managed_ledger_info(stored).ledgers
            for name, stored in self._managed_ledgers.items()
        }

    async def compacted_topics(self) -> tuple[set[str], set[str]]:
        """Companion topics of compacted topics: those that exist, those named by a
        managed ledger (read after listing, so a new one is named before it exists)."""
        prefix = compacted_topic_prefix(self._cluster)
        existing = {t for t in await self._admin.list_topics() if t.startswith(prefix)}
        await self._managed_ledgers.refresh()
        named = set()
        for _, stored in self._managed_ledgers.items():
            topic = formats.decode_managed_ledger_info(stored).properties.get(
                COMPACTED_TOPIC_PROPERTY
            )
            if topic is not None:
                named.add(topic)
        return existing, named

    # --- one ledger -----------------------------------------------------------------
    async def allocated_for(self, ledger_id: int) -> str | None:
        """The managed ledger name the id was allocated for; None if it never was."""
        return await self._lookup.allocation_of(ledger_id)

    async def ledger_header(self, ledger_id: int) -> LedgerMetadata | None:
        """What the ledger says about itself (managed ledger, component, cursor).

        None if its topic holds no record (created, the header never written: a crash
        mid-create). Raises LedgerHeaderError if the topic's first record is not a
        ledger header, StorageError if Kafka could not be read.
        """
        return await self._lookup.read_metadata(ledger_id)

    async def ledger_exists(self, ledger_id: int) -> bool:
        """Whether the ledger's Kafka copy (its topic) exists."""
        return await self._admin.topic_exists(self._lookup.topic(ledger_id))

    async def delete_ledger(self, ledger_id: int) -> bool:
        """Delete the ledger's Kafka copy; False if it was gone already."""
        return await self._admin.delete_topic(self._lookup.topic(ledger_id))

    # --- the cluster ----------------------------------------------------------------
    async def ledger_ids(self) -> list[int]:
        """Ids of every ledger whose Kafka copy exists, sorted."""
        topics = await self._admin.list_topics()
        ids = (formats.ledger_id_of_topic(self._cluster, topic) for topic in topics)
        return sorted(ledger_id for ledger_id in ids if ledger_id is not None)

    async def broker_admin_urls(self) -> list[str]:
        """Admin (HTTP) URLs of the brokers registered now."""
        await self._policies.refresh()
        return broker_urls(self._policies.items(BROKERS_KEY))
