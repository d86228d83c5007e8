"""Mark phase (broker side): one durable intent per ledger before it leaves its list.

The storage layer calls ``mark`` with the ledgers it wants to delete; each becomes a
``PendingDeleteLedgerInfo`` record on the deletion topic, and only the ledgers whose record
Kafka acknowledged (``acks=all``) are returned, so only those leave the ledger list. The
storage delete itself is the worker's job, so ``after_metadata`` does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.storage.api import LedgerToDelete, LedgerType, RecordSender, TopicCreator
from system_topics.intents import CopyKind, DeletionIntent, encode_intent
from system_topics.topics import DeletionTopics

log = logging.getLogger(__name__)


def intent_key(ledger_id: int) -> bytes:
    """Record key: intents of one ledger always land in the same partition."""
    return struct.pack(">q", ledger_id)


def intents_for(ledger: LedgerToDelete) -> list[DeletionIntent]:
    """The intents deleting ``ledger``'s copies."""
    types = [LedgerType.LEDGER] if ledger.kafka else []
    offload: dict[str, str] = {}
    if ledger.offload is not None:
        types.append(LedgerType.OFFLOAD_LEDGER)
        offload = ledger.offload.properties | {
            "driver": ledger.offload.driver,
            "uid": ledger.offload.uid,
        }
    return [
        DeletionIntent(
            topic_name=ledger.managed_ledger_name,
            ledger_id=ledger.ledger_id,
            component=ledger.component,
            ledger_type=ledger_type,
            cursor_name=ledger.cursor_name,
            offload=offload if ledger_type is LedgerType.OFFLOAD_LEDGER else {},
        )
        for ledger_type in types
    ]


async def create_deletion_topics(admin: TopicCreator, topics: DeletionTopics) -> None:
    for name, (partitions, settings) in topics.topic_configs().items():
        await admin.create_topic(name, settings, partitions=partitions)


class TwoPhaseLedgerDeleter:
    def __init__(self, topics: DeletionTopics, producer: RecordSender) -> None:
        self._topics = topics
        self._producer = producer
        # Not in any registry yet: the broker adds it to the registry its /metrics serves.
        self.sent = Counter(
            "dedup_broker_ledger_deletion_intents_sent_total",
            "Deletion intents Kafka acknowledged, by ledger type (ledger, offload)",
            ("type",),
            registry=None,
        )

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(self.sent)

    async def mark(self, ledgers: Sequence[LedgerToDelete]) -> set[int]:
        """One intent per copy (Kafka: LEDGER, tiered storage: OFFLOAD_LEDGER); a ledger
        is accepted once every intent of it was acknowledged."""
        if not ledgers:
            return set()
        intents = [(ledger, intent) for ledger in ledgers for intent in intents_for(ledger)]
        futures: list[asyncio.Future[int]] = []
        for ledger, intent in intents:
            try:
                futures.append(
                    self._producer.send(
                        self._topics.main, encode_intent(intent), key=intent_key(ledger.ledger_id)
                    )
                )
            except StorageError as exc:
                failed = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
                futures.append(failed)
        results = await asyncio.gather(*futures, return_exceptions=True)
        accepted = {ledger.ledger_id for ledger in ledgers}
        for (ledger, intent), result in zip(intents, results, strict=True):
            if isinstance(result, BaseException):
                log.warning(
                    "deletion intent (%s) for ledger %d not stored: %s",
                    intent.ledger_type.value,
                    ledger.ledger_id,
                    result,
                )
                accepted.discard(ledger.ledger_id)
            else:
                self.sent.labels(type=CopyKind.of(intent.ledger_type).value).inc()
        return accepted

    async def after_metadata(self, ledgers: Sequence[LedgerToDelete]) -> None:
        """Nothing: the deletion worker deletes storage."""


async def two_phase_deleter(
    config: BrokerConfig, admin: TopicCreator, producer: RecordSender
) -> TwoPhaseLedgerDeleter:
    """The storage's deleter factory for ``topicTwoPhaseDeletionEnabled``: the deletion
    topics exist before the first intent is written."""
    topics = DeletionTopics.from_config(config)
    await create_deletion_topics(admin, topics)
    return TwoPhaseLedgerDeleter(topics, producer)
