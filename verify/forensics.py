"""Where lost messages are, for a run that lost some: written while the servers still run.

For each topic with losses: the broker's ledger list (``internalStats``) next to what
every ledger topic of that managed ledger holds in Kafka, read committed and uncommitted,
entry by entry (ids of the messages inside), so that "never stored", "stored past the
recorded end" and "stored in an unlisted ledger" can be told apart.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from dedup_broker.domain_base.names import TopicName
from dedup_broker.protocol.batch import split_batch
from dedup_broker.protocol.framing import parse_message
from dedup_broker.storage import formats
from verify.environment import Admin
from verify.load import id_of

log = logging.getLogger(__name__)

FIRST_ENTRY_OFFSET = 1
"""A ledger topic's record 0 is its header; entry ``e`` is record ``e + 1``."""


def entry_ids(data: bytes) -> list[int]:
    """The message ids inside one stored entry (a batch holds several)."""
    try:
        parsed = parse_message(data)
        return [id_of(m.payload) for m in split_batch(parsed.metadata, parsed.payload)]
    except Exception:  # not ours, or damaged: shown as such
        return []


def _owner(bootstrap: str, topic: str) -> str:
    """The managed ledger a ledger topic belongs to (its header record), '' if unknown."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-forensics"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(10):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None and message.offset() == 0:
                try:
                    return formats.decode_ledger_metadata(
                        message.value() or b""
                    ).managed_ledger_name
                except Exception:
                    return ""
        return ""
    finally:
        consumer.close()


def _read_topic(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, list[int]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "verify-forensics",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, list[int]]] = []
        idle = 0
        while idle < 5:
            message = consumer.poll(1.0)
            if message is None:
                idle += 1
                continue
            if message.error() is not None:
                continue
            offset = message.offset() or 0
            if offset >= FIRST_ENTRY_OFFSET:
                out.append((offset - FIRST_ENTRY_OFFSET, entry_ids(message.value() or b"")))
            if offset >= high - 1:
                break
        return out
    finally:
        consumer.close()


def describe_losses(
    admin: Admin,
    bootstrap: str,
    cluster_name: str,
    topic: str,
    lost: set[int],
    out: Path,
) -> None:
    """Write ``out``: the ledger list, then where each ledger topic holds lost ids."""
    lines: list[str] = [f"topic {topic}: {len(lost)} lost ids, {min(lost)}..{max(lost)}"]
    try:
        stats: dict[str, Any] = admin.internal_stats(topic)
        lines.append("ledger list: " + json.dumps(stats.get("ledgers", [])))
        lines.append("cursors: " + json.dumps(stats.get("cursors", {}), default=str)[:4000])
    except Exception as exc:
        lines.append(f"internalStats failed: {exc!r}")
    kafka = AdminClient({"bootstrap.servers": bootstrap})
    prefix = f"{cluster_name}.ledger."
    ledger_topics = sorted(
        (t for t in kafka.list_topics(timeout=30).topics if t.startswith(prefix)),
        key=lambda t: formats.ledger_id_of_topic(cluster_name, t) or 0,
    )
    managed_ledger = TopicName.parse(topic).managed_ledger_name
    for ledger_topic in ledger_topics:
        if _owner(bootstrap, ledger_topic) != managed_ledger:
            continue
        committed = _read_topic(bootstrap, ledger_topic, "read_committed")
        found = [(e, sorted(lost & set(ids))) for e, ids in committed if lost & set(ids)]
        if found:
            lines.append(f"{ledger_topic} (committed, {len(committed)} entries) holds lost ids:")
            lines.extend(
                f"  entry {e}: {ids[:5]}{'...' if len(ids) > 5 else ''}" for e, ids in found
            )
        uncommitted = _read_topic(bootstrap, ledger_topic, "read_uncommitted")
        if len(uncommitted) != len(committed):
            lines.append(
                f"{ledger_topic}: {len(uncommitted)} entries read uncommitted, "
                f"{len(committed)} committed"
            )
    out.write_text("\n".join(lines) + "\n")
    log.info("forensics of %s written to %s", topic, out)
