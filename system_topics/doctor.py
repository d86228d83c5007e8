"""Consistency check of one cluster's ledgers (``dedup-broker doctor``).

- orphans: ledger topics that no managed ledger lists and no pending intent (main or
  RETRY, not yet committed by the worker group) covers: nothing will ever delete them;
- missing: ledgers a managed ledger lists whose topic does not exist (and whose Kafka
  copy was not deleted after an offload): data is gone;
- offloadOrphans / offloadMissing: the same for offloaded copies in tiered storage
  (files of offload attempts nothing lists or covers; complete offloads whose file is
  gone);
- compactedOrphans: companion topics of compacted topics that no managed ledger names
  (a crash between deleting a compacted topic's metadata and its companion).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dedup_broker.cluster.owners import TopicOwners
from dedup_broker.config import BrokerConfig
from dedup_broker.storage.api import LedgerCatalog, LedgerType, OffloadStore
from system_topics.intents import MalformedIntentError, decode_intent
from system_topics.lag import uncommitted_records
from system_topics.topics import DeletionTopics


def _pending_intents(config: BrokerConfig) -> tuple[set[int], set[tuple[int, str]]]:
    """Ledger ids (Kafka copies) and (ledger id, uid) pairs (offloaded copies) that
    intents not yet committed by the worker group will delete."""
    covered: set[int] = set()
    covered_offloads: set[tuple[int, str]] = set()
    topics = DeletionTopics.from_config(config)
    for value in uncommitted_records(config.kafka_connection(), topics):
        try:
            intent = decode_intent(value)
        except MalformedIntentError:
            continue
        if intent.ledger_type is LedgerType.LEDGER:
            covered.add(intent.ledger_id)
        else:
            covered_offloads.add((intent.ledger_id, intent.offload.get("uid", "")))
    return covered, covered_offloads


async def inspect(
    config: BrokerConfig,
    catalog: LedgerCatalog,
    owners: TopicOwners,
    offloader: OffloadStore | None,
) -> dict[str, Any]:
    """The report of ``dedup-broker doctor``; ``offloader``: this process's own tiered
    storage, if any (``dedup_broker/app/deletion_worker.py`` wires the rest)."""
    existing = set(await catalog.ledger_ids())
    lists = await catalog.managed_ledgers()
    companions, named_companions = await catalog.compacted_topics()
    brokers = await owners.summary()
    referenced: dict[int, str] = {}
    in_kafka: set[int] = set()
    offloads: dict[tuple[int, str], tuple[str, bool]] = {}
    for name, ledgers in sorted(lists.items()):
        for info in ledgers:
            referenced[info.ledger_id] = name
            if info.in_kafka:
                in_kafka.add(info.ledger_id)
            if info.offload is not None:
                offloads[(info.ledger_id, info.offload.uid)] = (name, info.offload.complete)
    covered, covered_offloads = await asyncio.to_thread(_pending_intents, config)
    orphans = sorted(existing - in_kafka - covered)
    missing = sorted(in_kafka - existing)
    offload_orphans: list[dict[str, Any]] = []
    offload_missing: list[dict[str, Any]] = []
    if offloader is not None:
        stored = offloader.copies()
        present = {(copy.ledger_id, copy.uid) for copy in stored if not copy.temporary}
        for copy in stored:
            key = (copy.ledger_id, copy.uid)
            if key not in offloads and key not in covered_offloads:
                offload_orphans.append(
                    {"ledgerId": copy.ledger_id, "uid": copy.uid, "path": str(copy.path)}
                )
        for (ledger_id, uid), (name, complete) in sorted(offloads.items()):
            if complete and (ledger_id, uid) not in present:
                offload_missing.append({"ledgerId": ledger_id, "uid": uid, "managedLedger": name})
    return {
        "cluster": config.cluster_name,
        "brokers": brokers["brokers"],
        "slotsByBroker": brokers["slotsByBroker"],
        "unownedSlots": brokers["unownedSlots"],
        "ledgerTopics": len(existing),
        "referencedLedgers": len(referenced),
        "pendingIntents": len(covered) + len(covered_offloads),
        "orphans": orphans,
        "missing": [{"ledgerId": i, "managedLedger": referenced[i]} for i in missing],
        "offloadedCopies": len(offloads),
        "offloadOrphans": offload_orphans,
        "offloadMissing": offload_missing,
        "compactedOrphans": sorted(companions - named_companions),
        "ok": not orphans
        and not missing
        and not offload_orphans
        and not offload_missing
        and not companions - named_companions,
    }
