"""Consistency check of one cluster's ledgers (``dedup-broker doctor``).

- orphans: ledger topics that no managed ledger lists and no pending intent (main or
  RETRY, not yet committed by the worker group) covers: nothing will ever delete them;
- missing: ledgers a managed ledger lists whose topic does not exist: data is gone.
"""

from __future__ import annotations

import re
from typing import Any

from dedup_broker.config import BrokerConfig
from dedup_broker.storage import formats
from system_topics.intents import LEDGER, MalformedIntentError, decode_intent
from system_topics.kafka_sync import SyncKafka, SyncTable
from system_topics.topics import DeletionTopics


def _pending_intents(kafka: SyncKafka, topics: DeletionTopics) -> set[int]:
    from confluent_kafka import Consumer, TopicPartition

    covered: set[int] = set()
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
                    start = int(records[-1].offset() or 0) + 1
    finally:
        committed_reader.close()
    return covered


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
        for name, value in table.items():
            for info in formats.decode_managed_ledger_info(value).ledgers:
                referenced[info.ledger_id] = name
        covered = _pending_intents(kafka, DeletionTopics.from_config(config))
    finally:
        kafka.close()
    orphans = sorted(existing - set(referenced) - covered)
    missing = sorted(set(referenced) - existing)
    return {
        "cluster": config.cluster_name,
        "ledgerTopics": len(existing),
        "referencedLedgers": len(referenced),
        "pendingIntents": len(covered),
        "orphans": orphans,
        "missing": [{"ledgerId": i, "managedLedger": referenced[i]} for i in missing],
        "ok": not orphans and not missing,
    }
