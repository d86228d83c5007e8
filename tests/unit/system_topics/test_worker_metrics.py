"""The deletion worker's counters: names as exposed before, counted per outcome."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import disable_created_metrics, enable_created_metrics

from dedup_broker.metrics_registry import exposition
from system_topics.decision import Action, Verdict
from system_topics.intents import CopyKind
from system_topics.worker_metrics import WorkerMetrics

P = "dedup_broker_ledger_deletion_"


@pytest.fixture
def no_created_series() -> Iterator[None]:
    """As the worker process runs (the setting is process-wide)."""
    disable_created_metrics()
    try:
        yield
    finally:
        enable_created_metrics()


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_names_and_counts(no_created_series: None) -> None:
    metrics = WorkerMetrics()
    metrics.received.inc(5)
    metrics.record(Verdict.DELETED, Action.ACK, CopyKind.LEDGER)
    metrics.record(Verdict.ALREADY_GONE, Action.ACK, CopyKind.OFFLOAD)
    metrics.record(Verdict.NOT_OURS, Action.ACK)
    metrics.record(Verdict.FAILED, Action.RETRY)
    metrics.record(Verdict.FAILED, Action.DEAD_LETTER)
    metrics.acknowledged.inc(4)
    text = exposition(metrics.registry).decode()
    types = sorted(line for line in text.splitlines() if line.startswith("# TYPE"))
    assert types == [
        "# TYPE dedup_broker_kafka_client_errors_total counter",
        *(
            f"# TYPE {P}{name}_total counter"
            for name in (
                "failed",
                "intents_acknowledged",
                "intents_received",
                "intents_rejected",
                "intents_retried",
            )
        ),
        f"# TYPE {P}lag gauge",
        f"# TYPE {P}ledgers_deleted_total counter",
        f"# TYPE {P}max_retries_reached_total counter",
    ]
    ours = {name: value for name, value in _samples(text).items() if name.startswith(P)}
    assert ours == {
        P + "intents_received_total": 5,
        P + 'ledgers_deleted_total{type="ledger"}': 1,
        P + 'ledgers_deleted_total{type="offload"}': 1,
        P + 'intents_rejected_total{reason="not-ours"}': 1,
        P + "failed_total": 2,
        P + "intents_retried_total": 1,
        P + "intents_acknowledged_total": 4,
        P + "max_retries_reached_total": 1,
    }
