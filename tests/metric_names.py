"""The metric families the broker and the deletion worker expose on ``/metrics``: names,
types and label names, as dashboards and alerts know them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Family = tuple[str, str, tuple[str, ...]]
"""``(name as on the # TYPE line, type, label names)``."""

BROKER_FAMILIES: list[Family] = [
    # Pulsar's own names; Pulsar exposes these two as gauges too.
    ("pulsar_connection_created_total_count", "gauge", ()),
    ("pulsar_connection_closed_total_count", "gauge", ()),
    ("pulsar_active_connections", "gauge", ()),
    ("pulsar_topics_count", "gauge", ()),
    ("pulsar_producers_count", "gauge", ()),
    ("pulsar_consumers_count", "gauge", ()),
    ("pulsar_in_messages_total", "counter", ()),
    ("pulsar_in_bytes_total", "counter", ()),
    ("pulsar_out_messages_total", "gauge", ()),
    ("pulsar_out_bytes_total", "gauge", ()),
    ("pulsar_broker_publish_latency_seconds", "histogram", ()),
    ("dedup_broker_kafka_write_errors_total", "counter", ()),
    ("dedup_broker_checksum_errors_total", "counter", ()),
    ("dedup_broker_protocol_errors_total", "counter", ()),
    ("dedup_broker_deduplication_verdicts_total", "counter", ("verdict",)),
    ("dedup_broker_key_dedup_repeats_dropped_total", "counter", ()),
    ("dedup_broker_key_dedup_redis_latency_seconds", "histogram", ()),
    ("dedup_broker_key_dedup_redis_errors_total", "counter", ()),
    ("dedup_broker_key_dedup_redis_round_trips_total", "gauge", ()),
    ("dedup_broker_key_dedup_keys_tracked", "gauge", ("scope",)),
    ("dedup_broker_non_persistent_in_messages_total", "counter", ()),
    ("dedup_broker_non_persistent_out_messages_total", "counter", ()),
    ("dedup_broker_non_persistent_dropped_messages_total", "counter", ("reason",)),
    ("dedup_broker_non_persistent_topics", "gauge", ()),
    # Registered when two-phase ledger deletion is on (the default).
    ("dedup_broker_ledger_deletion_intents_sent_total", "counter", ("type",)),
]

WORKER_FAMILIES: list[Family] = [
    ("dedup_broker_ledger_deletion_intents_received_total", "counter", ()),
    ("dedup_broker_ledger_deletion_ledgers_deleted_total", "counter", ("type",)),
    ("dedup_broker_ledger_deletion_intents_rejected_total", "counter", ("reason",)),
    ("dedup_broker_ledger_deletion_failed_total", "counter", ()),
    ("dedup_broker_ledger_deletion_intents_retried_total", "counter", ()),
    ("dedup_broker_ledger_deletion_intents_acknowledged_total", "counter", ()),
    ("dedup_broker_ledger_deletion_max_retries_reached_total", "counter", ()),
]


def exposed_families(text: str) -> list[tuple[str, str]]:
    """``(name, type)`` of each ``# TYPE`` line, in order; the whole text must parse."""
    list(text_string_to_metric_families(text))
    return [
        (parts[2], parts[3])
        for parts in (line.split() for line in text.splitlines())
        if parts[:2] == ["#", "TYPE"]
    ]


def label_names(text: str) -> dict[str, set[str]]:
    """Label names of each family's samples (``le`` aside), by family name as parsed."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.setdefault(family.name, set()).update(set(sample.labels) - {"le"})
    return names


def sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}
