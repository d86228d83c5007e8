"""docs/metrics.md, written from the registries of a broker and of a deletion worker.

``python -m dedup_broker.app.metrics_reference`` rewrites the page; a unit test fails
when the page differs from what this module writes, so a family added, renamed or
re-described shows up there in the same change. The registries are built here with the
collectors ``broker_app`` and ``deletion_worker`` register, bound to nothing running.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from dedup_broker.cluster.metrics import ClusterMetrics
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.metrics import BrokerMetrics
from dedup_broker.kafka_logging import KafkaClientErrors
from dedup_broker.key_dedup.metrics import KeyDedupMetrics
from dedup_broker.metrics_registry import FamilyInfo, MetricsRegistry, families_of, new_registry
from dedup_broker.session.metrics import SessionMetrics
from dedup_broker.transactions.metrics import CoordinatorMetrics
from system_topics.mark_phase import TwoPhaseLedgerDeleter
from system_topics.topics import DeletionTopics
from system_topics.worker_metrics import WorkerMetrics

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

INTRO = """\
# Metrics

<!-- Written by `python -m dedup_broker.app.metrics_reference`; edit that module, not this page. -->

A broker serves Prometheus's text format on `/metrics` of its web port (8080), a deletion
worker on `deletionWorkerWebServicePort` (8081). Families Pulsar has keep Pulsar's names,
labels and meanings, so Pulsar's dashboards work; counters are typed counters. The
dashboard in `deploy/grafana/dedup-broker.json` and the alert and recording rules in
`deploy/prometheus/rules.yml` use only the families below (tests check both against a
running broker).

Per-topic families carry `cluster`, `namespace` and `topic` (per subscription also
`subscription`). With `exposeTopicLevelMetricsInPrometheus=false` they are summed per
namespace instead (labels `cluster`, `namespace`; the subscription families are left out,
and `pulsar_out_messages_total`, `pulsar_out_bytes_total` and `pulsar_subscription_delayed`
are summed into the namespace), as Pulsar does. The `pulsar_broker_*` families (label
`cluster`) are the topic families summed over every topic the broker serves, persistent
and non-persistent, whether topic-level metrics are on or off, as Pulsar's. Rates are the
last stats period's (`statsUpdateFrequencyInSecs`, 60 s by default), as are the
`pulsar_storage_write_latency_*` and `pulsar_entry_size_*` buckets: entries of that period
in each bucket, gauges as in Pulsar. `pulsar_storage_write_rate` counts the entries the
managed ledger stored, `pulsar_storage_read_rate` the entries subscriptions and readers
read to dispatch (redeliveries included). `pulsar_subscription_msg_ack_rate` counts
messages (each of a batch, each a cumulative acknowledgement covers) when their consumer
acknowledges them, in a transaction too. Counters of a topic start at zero when it is
loaded (as Pulsar's). The deduplication families appear for topics with deduplication
(PIP-6) on.

Pulsar's `pulsar_connection_created_total_count` and `pulsar_connection_closed_total_count`
(typed gauges there) are the counters `pulsar_connection_created_total` and
`pulsar_connection_closed_total` here. `dedup_broker_kafka_client_errors_total` counts the
error lines of all Kafka clients of a process.
"""


class _Unsent:
    """A record sender for a deleter that is only asked for its metric."""

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int = -1,
        timestamp_ms: int = 0,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[int]:
        raise RuntimeError("the metrics reference sends nothing")


def broker_registry(config: BrokerConfig | None = None) -> MetricsRegistry:
    """Every collector a broker registers (transactions' only with the coordinator on)."""
    config = config or BrokerConfig()
    registry = new_registry()
    metrics = BrokerMetrics(registry)
    metrics.watch_topics(config, lambda: (), lambda: ())
    SessionMetrics(registry)
    KeyDedupMetrics(registry)
    deleter = TwoPhaseLedgerDeleter(DeletionTopics.from_config(config), _Unsent())
    deleter.register_metrics(registry)
    registry.register(
        ClusterMetrics(config.cluster_name, config.cluster_ownership_slots, _NoSlots())
    )
    registry.register(KafkaClientErrors())
    registry.register(CoordinatorMetrics(lambda: {}))
    return registry


class _NoSlots:
    owned: frozenset[int] = frozenset()


def _table(families: list[FamilyInfo]) -> str:
    lines = ["| Family | Type | Labels | Meaning |", "|---|---|---|---|"]
    for family in families:
        labels = ", ".join(f"`{label}`" for label in family.labels) or "-"
        meaning = family.documentation.replace("|", "\\|")
        lines.append(f"| `{family.name}` | {family.kind} | {labels} | {meaning} |")
    return "\n".join(lines) + "\n"


def reference() -> str:
    """The page's text."""
    broker = families_of(broker_registry())
    pulsar = [f for f in broker if f.name.startswith("pulsar_")]
    ours = [f for f in broker if not f.name.startswith("pulsar_")]
    worker_registry = new_registry()
    WorkerMetrics(worker_registry)
    worker = families_of(worker_registry)
    return "\n".join(
        [
            INTRO,
            "## Broker: Pulsar's families\n",
            _table(pulsar),
            "## Broker: dedup-broker's families\n",
            _table(ours),
            "## Deletion worker\n",
            _table(worker),
        ]
    )


def main() -> None:
    PAGE.write_text(reference())
    sys.stdout.write(f"wrote {PAGE}\n")


if __name__ == "__main__":
    main()
