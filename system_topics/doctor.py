"""Consistency check of one cluster's ledgers (``dedup-broker doctor``).

- orphans: ledger topics that no managed ledger lists and no pending intent (main or
  RETRY, not yet committed by the worker group) covers: nothing will ever delete them;
- missing: ledgers a managed ledger lists whose topic does not exist (and whose Kafka
  copy was not deleted after an offload): data is gone;
- offloadOrphans / offloadMissing: the same for offloaded copies in tiered storage
  (files of offload attempts nothing lists or covers; complete offloads whose file is
  gone).
"""

from __future__ import annotations

import re
from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.storage import formats
from dedup_broker.storage.offload_fs import offloader_from_config
from system_topics.intents import LEDGER, OFFLOAD_LEDGER, MalformedIntentError, decode_intent
from system_topics.kafka_sync import SyncKafka, SyncTable
from system_topics.topics import DeletionTopics


def _pending_intents(
    kafka: SyncKafka, topics: DeletionTopics
) -> tuple[set[int], set[tuple[int, str]]]:
    """Ledger ids (Kafka copies) and (ledger id, uid) pairs (offloaded copies) that
    intents not yet committed by the worker group will delete."""
    from confluent_kafka import Consumer, TopicPartition

    covered: set[int] = set()
    covered_offloads: set[tuple[int, str]] = set()
    committed_reader = Consumer(
        {
            "bootstrap.servers": kafka.admin_bootstrap,
            "group.id": topics.group,
            "enable.auto.commit": False,
        }
    )
    try:
        for topic in (topics.main, topics.retry):
            partitions = kafka.partitions(topic)
            if not partitions:
                continue
            committed = committed_reader.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=kafka.timeout_s
            )
            for tp in committed:
                low, high = kafka.watermarks(topic, tp.partition)
                start = tp.offset if tp.offset >= 0 else low
                while start < high:
                    records = kafka.read(topic, start, high, partition=tp.partition)
                    if not records:
                        break
                    for msg in records:
                        try:
                            intent = decode_intent(msg.value())
                        except MalformedIntentError:
                            continue
                        if intent.ledger_type == LEDGER:
                            covered.add(intent.ledger_id)
                        elif intent.ledger_type == OFFLOAD_LEDGER:
                            uid = intent.offload.get("uid", "")
                            covered_offloads.add((intent.ledger_id, uid))
                    start = int(records[-1].offset() or 0) + 1
    finally:
        committed_reader.close()
    return covered, covered_offloads


def check(config: BrokerConfig) -> dict[str, Any]:
    kafka = SyncKafka(config.kafka_bootstrap_servers, f"{config.cluster_name}.doctor")
    try:
        pattern = re.compile(re.escape(config.cluster_name) + r"\.ledger\.(\d+)")
        existing = {
            int(m.group(1)) for t in kafka.list_topics() if (m := pattern.fullmatch(t)) is not None
        }
        table = SyncTable(kafka, f"{config.cluster_name}.managed-ledgers")
        table.refresh()
        referenced: dict[int, str] = {}
        in_kafka: set[int] = set()
        offloads: dict[tuple[int, str], tuple[str, bool]] = {}
        for name, value in table.items():
            for info in formats.decode_managed_ledger_info(value).ledgers:
                referenced[info.ledger_id] = name
                if info.in_kafka:
                    in_kafka.add(info.ledger_id)
                if info.offload is not None:
                    offloads[(info.ledger_id, info.offload.uid)] = (name, info.offload.complete)
        covered, covered_offloads = _pending_intents(kafka, DeletionTopics.from_config(config))
    finally:
        kafka.close()
    orphans = sorted(existing - in_kafka - covered)
    missing = sorted(in_kafka - existing)
    offload_orphans: list[dict[str, Any]] = []
    offload_missing: list[dict[str, Any]] = []
    offloader = offloader_from_config(config)
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
        "ledgerTopics": len(existing),
        "referencedLedgers": len(referenced),
        "pendingIntents": len(covered) + len(covered_offloads),
        "orphans": orphans,
        "missing": [{"ledgerId": i, "managedLedger": referenced[i]} for i in missing],
        "offloadedCopies": len(offloads),
        "offloadOrphans": offload_orphans,
        "offloadMissing": offload_missing,
        "ok": not orphans and not missing and not offload_orphans and not offload_missing,
    }
