"""The metric families the broker and the deletion worker expose on ``/metrics``: names,
types and label names, as dashboards and alerts know them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dedup-broker.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"

Family = tuple[str, str, tuple[str, ...]]
"""``(name as on the # TYPE line, type, label names)``."""

TOPIC = ("cluster", "namespace", "topic")
SUBSCRIPTION = (*TOPIC, "subscription")
NAMESPACE = ("cluster", "namespace")
WRITE_LATENCY = (
    *("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000"),
    *("overflow", "count", "sum"),
)
"""Pulsar's bucket names: milliseconds."""
BROKER_SUMS = (
    *("topics_count", "subscriptions_count", "producers_count", "consumers_count"),
    *("rate_in", "rate_out", "throughput_in", "throughput_out"),
    *("storage_size", "storage_logical_size", "storage_write_rate", "storage_read_rate"),
    "msg_backlog",
)
"""Pulsar's ``pulsar_broker_*`` families, each ``pulsar_*`` of the topics summed
(``topics_count``: the topics)."""
ENTRY_SIZE = (
    *("le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb"),
    *("le_overflow", "count", "sum"),
)

BROKER_FAMILIES: list[Family] = [
    # The process: connections (Pulsar names these two ..._total_count and types them
    # gauges; counters here), the publish latency, bad input, Kafka.
    ("pulsar_connection_created_total", "counter", ()),
    ("pulsar_connection_closed_total", "counter", ()),
    ("pulsar_active_connections", "gauge", ()),
    ("pulsar_broker_publish_latency_seconds", "histogram", ()),
    ("dedup_broker_kafka_write_errors_total", "counter", ()),
    ("dedup_broker_kafka_client_errors_total", "counter", ("facility",)),
    ("dedup_broker_checksum_errors_total", "counter", ()),
    ("dedup_broker_protocol_errors_total", "counter", ()),
    ("dedup_broker_owned_slots", "gauge", ("cluster",)),
    ("dedup_broker_ownership_slots", "gauge", ("cluster",)),
    # Pulsar's per-topic families, with Pulsar's labels.
    ("pulsar_topics_count", "gauge", ("cluster", "namespace")),
    ("pulsar_subscriptions_count", "gauge", TOPIC),
    ("pulsar_producers_count", "gauge", TOPIC),
    ("pulsar_consumers_count", "gauge", TOPIC),
    ("pulsar_rate_in", "gauge", TOPIC),
    ("pulsar_rate_out", "gauge", TOPIC),
    ("pulsar_throughput_in", "gauge", TOPIC),
    ("pulsar_throughput_out", "gauge", TOPIC),
    ("pulsar_storage_size", "gauge", TOPIC),
    ("pulsar_storage_logical_size", "gauge", TOPIC),
    ("pulsar_storage_backlog_size", "gauge", TOPIC),
    ("pulsar_storage_offloaded_size", "gauge", TOPIC),
    ("pulsar_storage_write_rate", "gauge", TOPIC),
    ("pulsar_storage_read_rate", "gauge", TOPIC),
    ("pulsar_msg_backlog", "gauge", TOPIC),
    ("pulsar_in_messages_total", "counter", TOPIC),
    ("pulsar_in_bytes_total", "counter", TOPIC),
    *((f"pulsar_storage_write_latency_{s}", "gauge", TOPIC) for s in WRITE_LATENCY),
    *((f"pulsar_entry_size_{s}", "gauge", TOPIC) for s in ENTRY_SIZE),
    ("pulsar_subscription_back_log", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_back_log_no_delayed", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_delayed", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_unacked_messages", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_msg_rate_out", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_msg_throughput_out", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_msg_rate_redeliver", "gauge", SUBSCRIPTION),
    ("pulsar_subscription_consumers_count", "gauge", SUBSCRIPTION),
    ("pulsar_out_messages_total", "counter", SUBSCRIPTION),
    ("pulsar_out_bytes_total", "counter", SUBSCRIPTION),
    ("pulsar_subscription_msg_ack_rate", "gauge", SUBSCRIPTION),
    # Pulsar's broker-level sums of the topic families.
    *((f"pulsar_broker_{name}", "gauge", ("cluster",)) for name in BROKER_SUMS),
    # Deduplication (PIP-6), per topic.
    ("dedup_broker_deduplication_producers", "gauge", TOPIC),
    ("dedup_broker_deduplication_entries_since_snapshot", "gauge", TOPIC),
    ("dedup_broker_deduplication_last_snapshot_timestamp_seconds", "gauge", TOPIC),
    ("dedup_broker_deduplication_snapshots_total", "counter", TOPIC),
    ("dedup_broker_deduplication_snapshot_failures_total", "counter", TOPIC),
    ("dedup_broker_deduplication_verdicts_total", "counter", (*TOPIC, "verdict")),
    # Key-window deduplication, per namespace.
    ("dedup_broker_key_dedup_hits_total", "counter", NAMESPACE),
    ("dedup_broker_key_dedup_misses_total", "counter", NAMESPACE),
    ("dedup_broker_key_dedup_redis_latency_seconds", "histogram", NAMESPACE),
    ("dedup_broker_key_dedup_redis_errors_total", "counter", NAMESPACE),
    ("dedup_broker_key_dedup_redis_round_trips_total", "counter", ()),
    ("dedup_broker_key_dedup_keys_tracked", "gauge", ("scope",)),
    ("dedup_broker_non_persistent_in_messages_total", "counter", ()),
    ("dedup_broker_non_persistent_out_messages_total", "counter", ()),
    ("dedup_broker_non_persistent_dropped_messages_total", "counter", ("reason",)),
    ("dedup_broker_non_persistent_topics", "gauge", ()),
    # Registered when two-phase ledger deletion is on (the default).
    ("dedup_broker_ledger_deletion_intents_sent_total", "counter", ("type",)),
]

TRANSACTION_FAMILIES: list[Family] = [
    # Registered with transactionCoordinatorEnabled=true.
    ("pulsar_txn_active_count", "gauge", ("coordinator_id",)),
    *(
        (f"pulsar_txn_{name}_total", "counter", ("coordinator_id",))
        for name in ("created", "committed", "aborted", "timeout", "append_log")
    ),
]

WORKER_FAMILIES: list[Family] = [
    ("dedup_broker_ledger_deletion_intents_received_total", "counter", ()),
    ("dedup_broker_ledger_deletion_ledgers_deleted_total", "counter", ("type",)),
    ("dedup_broker_ledger_deletion_intents_rejected_total", "counter", ("reason",)),
    ("dedup_broker_ledger_deletion_failed_total", "counter", ()),
    ("dedup_broker_ledger_deletion_intents_retried_total", "counter", ()),
    ("dedup_broker_ledger_deletion_intents_acknowledged_total", "counter", ()),
    ("dedup_broker_ledger_deletion_max_retries_reached_total", "counter", ()),
    ("dedup_broker_ledger_deletion_lag", "gauge", ("topic",)),
    ("dedup_broker_kafka_client_errors_total", "counter", ("facility",)),
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


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_OUR_NAMES = re.compile(r"\b(?:pulsar|dedup_broker)_[A-Za-z0-9_]*")


def names_in(expression: str) -> set[str]:
    """The metric names a PromQL expression reads (every family here starts with
    ``pulsar_`` or ``dedup_broker_``; quoted label values aside)."""
    return set(_OUR_NAMES.findall(_QUOTED.sub('""', expression)))


def unknown_names(expression: str, families: dict[str, str]) -> set[str]:
    """Names in ``expression`` that are neither a family of ``families`` (name: type)
    nor a series of one of its histograms."""
    unknown = set()
    for name in names_in(expression):
        base, _, suffix = name.rpartition("_")
        histogram = suffix in ("bucket", "count", "sum") and families.get(base) == "histogram"
        if name not in families and not histogram:
            unknown.add(name)
    return unknown


def dashboard_expressions() -> list[str]:
    """Every query of the Grafana dashboard: its panels' and its variables'."""
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            expressions.append(query["query"])
    return expressions
