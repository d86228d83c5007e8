"""Metrics on prometheus_client: one registry per broker or worker, today's names exposed."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any, cast

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from dedup_broker.domain.metrics import PUBLISH_LATENCY_BUCKETS
from dedup_broker.domain.non_persistent.metrics import DropReason
from dedup_broker.metrics_registry import CONTENT_TYPE, exposition, new_registry
from system_topics.decision import Action, Verdict
from system_topics.intents import CopyKind
from system_topics.mark_phase import TwoPhaseLedgerDeleter
from system_topics.worker_metrics import WorkerMetrics, serve_metrics
from tests.metric_names import (
    BROKER_FAMILIES,
    WORKER_FAMILIES,
    exposed_families,
    label_names,
    sample_names,
)
from tests.unit.http.admin_fakes import FakeBroker


def broker_text(broker: FakeBroker) -> str:
    return exposition(broker.registry).decode()


def test_broker_exposes_todays_names_types_and_labels() -> None:
    broker = FakeBroker()
    deleter = TwoPhaseLedgerDeleter(cast(Any, None), cast(Any, None))
    deleter.register_metrics(broker.registry)
    broker.metrics.dedup_verdicts.labels(verdict="Dup").inc()
    broker.key_dedup.metrics._tracked.labels(scope="s").set(2)
    broker.metrics.non_persistent.dropped(DropReason.NO_PERMITS, 1)
    deleter.sent.labels(type="ledger").inc()
    text = broker_text(broker)
    assert sorted(exposed_families(text)) == sorted(
        (name, kind) for name, kind, _ in BROKER_FAMILIES
    )
    labels = label_names(text)
    for name, kind, expected in BROKER_FAMILIES:
        parsed = name.removesuffix("_total") if kind == "counter" else name
        assert labels.get(parsed, set()) == set(expected), name
    assert not any(name.endswith("_created") for name in sample_names(text))


def test_counters_gauges_and_histograms_update() -> None:
    broker = FakeBroker()
    metrics = broker.metrics
    broker.session_metrics.connections_opened.inc()
    broker.session_metrics.producers.inc(2)
    broker.session_metrics.producers.dec()
    metrics.record_publish(messages=3, size=100, seconds=0.003)
    broker.add_topic("persistent://public/default/a")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(broker_text(broker))
        for s in f.samples
    }
    assert samples[("pulsar_connection_created_total_count", ())] == 1
    assert samples[("pulsar_producers_count", ())] == 1
    assert samples[("pulsar_in_messages_total", ())] == 3
    assert samples[("pulsar_in_bytes_total", ())] == 100
    assert samples[("pulsar_topics_count", ())] == 1  # read when scraped
    latency = "pulsar_broker_publish_latency_seconds"
    assert samples[(latency + "_count", ())] == 1
    assert samples[(latency + "_sum", ())] == 0.003
    buckets = {
        float(dict(labels)["le"]): value
        for (name, labels), value in samples.items()
        if name == latency + "_bucket"
    }
    assert sorted(buckets) == [*PUBLISH_LATENCY_BUCKETS, float("inf")]
    assert buckets[0.002] == 0 and buckets[0.005] == 1


def test_every_broker_has_its_own_registry() -> None:
    first, second = FakeBroker(), FakeBroker()
    first.metrics.msgs_in.inc(5)
    assert first.registry is not second.registry
    values = [
        next(
            s.value
            for f in text_string_to_metric_families(broker_text(broker))
            for s in f.samples
            if s.name == "pulsar_in_messages_total"
        )
        for broker in (first, second)
    ]
    assert values == [5, 0]


def test_exposition_has_no_created_series_and_the_text_content_type() -> None:
    registry = new_registry()
    Gauge("up", "Broker is up.", registry=registry).set(1)
    assert exposition(registry) == b"# HELP up Broker is up.\n# TYPE up gauge\nup 1.0\n"
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert isinstance(registry, CollectorRegistry)


def test_worker_metrics_are_served_by_prometheus_client() -> None:
    metrics = WorkerMetrics()
    metrics.received.inc()
    metrics.record(Verdict.DELETED, Action.ACK, CopyKind.OFFLOAD)
    server = serve_metrics(metrics, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE
            text = response.read().decode()
        with urllib.request.urlopen(url + "/health", timeout=10) as response:
            assert response.read() == b"ok"
        try:
            urllib.request.urlopen(url + "/other", timeout=10)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    finally:
        server.shutdown()
        server.server_close()
    assert exposed_families(text) == [(name, kind) for name, kind, _ in WORKER_FAMILIES]
    samples = {
        (s.name, tuple(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("dedup_broker_ledger_deletion_intents_received_total", ())] == 1
    deleted = "dedup_broker_ledger_deletion_ledgers_deleted_total"
    assert samples[(deleted, (("type", "offload"),))] == 1
    assert not any(name.endswith("_created") for name, _ in samples)
