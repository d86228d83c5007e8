"""Metrics on prometheus_client: one registry per broker or worker, today's names exposed."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from dedup_broker.app.metrics_reference import broker_registry
from dedup_broker.domain.metrics import PUBLISH_LATENCY_BUCKETS
from dedup_broker.metrics_registry import CONTENT_TYPE, exposition, families_of, new_registry
from harness.domain_links import new_producer, publish
from harness.memory_broker import MemoryBroker
from system_topics.decision import Action, Verdict
from system_topics.intents import CopyKind
from system_topics.worker_metrics import WorkerMetrics, serve_metrics
from tests.metric_names import (
    BROKER_FAMILIES,
    TRANSACTION_FAMILIES,
    WORKER_FAMILIES,
    exposed_families,
    sample_names,
)


def broker_text(broker: MemoryBroker) -> str:
    return exposition(broker.broker.metrics.registry).decode()


def test_broker_exposes_todays_names_types_and_labels() -> None:
    registry = broker_registry()
    expected = [*BROKER_FAMILIES, *TRANSACTION_FAMILIES]
    described = {(f.name, f.kind, f.labels) for f in families_of(registry)}
    assert described == set(expected)
    text = exposition(registry).decode()
    assert sorted(exposed_families(text)) == sorted((name, kind) for name, kind, _ in expected)
    assert not any(name.endswith("_created") for name in sample_names(text))


async def test_counters_gauges_and_histograms_update() -> None:
    broker = MemoryBroker()
    client = await broker.client()
    topic = await broker.topic("persistent://public/default/a")
    producer = new_producer("p")
    topic.add_producer(producer)
    for sequence in range(3):
        await publish(topic, producer, sequence)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(broker_text(broker))
        for s in f.samples
    }
    assert samples[("pulsar_connection_created_total", ())] == 1
    assert samples[("pulsar_active_connections", ())] == 1
    labels = (
        ("cluster", "standalone"),
        ("namespace", "public/default"),
        ("topic", "persistent://public/default/a"),
    )
    assert samples[("pulsar_producers_count", labels)] == 1  # read when scraped
    assert samples[("pulsar_in_messages_total", labels)] == 3
    assert samples[("pulsar_topics_count", labels[:2])] == 1
    latency = "pulsar_broker_publish_latency_seconds"
    assert samples[(latency + "_count", ())] == 3
    buckets = {
        float(dict(labels)["le"]): value
        for (name, labels), value in samples.items()
        if name == latency + "_bucket"
    }
    assert sorted(buckets) == [*PUBLISH_LATENCY_BUCKETS, float("inf")]
    client.disconnect()


async def test_every_broker_has_its_own_registry() -> None:
    first, second = MemoryBroker(), MemoryBroker()
    first.broker.metrics.publish_latency.observe(0.1)
    assert first.broker.metrics.registry is not second.broker.metrics.registry
    counts = [
        next(
            s.value
            for f in text_string_to_metric_families(broker_text(broker))
            for s in f.samples
            if s.name == "pulsar_broker_publish_latency_seconds_count"
        )
        for broker in (first, second)
    ]
    assert counts == [1, 0]


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
