"""A running broker and deletion worker under load: /metrics is valid Prometheus text with
the families dashboards know, labelled as Pulsar labels them; docs/metrics.md lists each
of them and the Grafana dashboard reads nothing else.

One broker (PIP-6 on, a key-window topic, 1 s stats period) and one worker serve the
whole module; a producer and a consumer keep a topic busy meanwhile, beside a
subscription whose consumer left.
"""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dedup_broker.app.metrics_reference import PAGE
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from harness.worker_process import WorkerProcess
from tests.integration.conftest import make_broker
from tests.integration.system_topics.deletion_helpers import wait_until
from tests.metric_names import (
    BROKER_FAMILIES,
    BROKER_SUMS,
    WORKER_FAMILIES,
    dashboard_expressions,
    exposed_families,
    label_names,
    names_in,
    sample_names,
    unknown_names,
)


@dataclass
class Loaded:
    broker: BrokerProcess
    worker: WorkerProcess
    topic: str


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text: str = response.read().decode()
    return text


def _keep_busy(client: pulsar.Client, topic: str, sent: list[int], stop: threading.Event) -> None:
    """Publish and consume until ``stop``: a message every 20 ms, each one acknowledged
    (``sent[0]`` counts them)."""
    producer = client.create_producer(topic, producer_name="busy", batching_enabled=False)
    consumer = client.subscribe(topic, "live")
    while not stop.wait(0.02):
        producer.send(f"m-{sent[0]}".encode(), sequence_id=sent[0] + 1)
        sent[0] += 1
        consumer.acknowledge(consumer.receive(10_000))


@pytest.fixture(scope="module")
def loaded(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    folder: Path = tmp_path_factory.mktemp("metrics")
    broker = make_broker(
        kafka_bootstrap,
        folder,
        redis_url=redis_url,
        broker_deduplication_enabled=True,
        stats_update_frequency_in_secs=1,
    )
    worker = WorkerProcess(kafka_bootstrap, broker.cluster_name, log_dir=folder)
    broker.start()
    worker.start()
    stop = threading.Event()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    busy: threading.Thread | None = None
    try:
        topic = f"persistent://public/default/metrics-{uuid.uuid4().hex[:8]}"
        client.subscribe(topic, "stopped").close()  # its backlog grows from now on
        again = client.create_producer(topic, producer_name="again", batching_enabled=False)
        again.send(b"first", sequence_id=7)  # (the client takes 0 for "none given")
        again.send(b"first, resent", sequence_id=7)  # a PIP-6 duplicate
        keyed = f"{topic}-keyed"
        policy = json.dumps({"enabled": True, "keySource": "content"}).encode()
        path = "/admin/v2/" + keyed.replace("://", "/") + "/keyDeduplication"
        assert http_request("POST", broker.http_url + path, policy)[0] == 204
        repeats = client.create_producer(keyed, batching_enabled=False)
        for _ in range(5):
            repeats.send(b"same content")  # 4 key-window repeats
        sent = [0]
        busy = threading.Thread(target=_keep_busy, args=(client, topic, sent, stop), daemon=True)
        busy.start()
        wait_until(lambda: sent[0] >= 100, 60, "100 messages sent and received")
        wait_until(lambda: _rate_in(broker, topic) > 0, 30, "a rate over a stats period")
        yield Loaded(broker, worker, topic)
    finally:
        stop.set()
        if busy is not None:
            busy.join(30)
        client.close()
        worker.stop()
        broker.stop()


def _rate_in(broker: BrokerProcess, topic: str) -> float:
    for line in scrape(broker.http_url).splitlines():
        if line.startswith("pulsar_rate_in{") and f'topic="{topic}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_the_broker_families_appear_with_their_labels_under_load(loaded: Loaded) -> None:
    text = scrape(loaded.broker.http_url)
    assert sorted(exposed_families(text)) == sorted((n, k) for n, k, _ in BROKER_FAMILIES)
    labels = label_names(text)
    for name, kind, expected in BROKER_FAMILIES:
        parsed = name.removesuffix("_total") if kind == "counter" else name
        if {"topic", "namespace"} & set(expected):  # what the load must show
            assert labels.get(parsed) == set(expected), name
        elif parsed in labels:
            assert labels[parsed] == set(expected), name
    assert not any(name.endswith("_created") for name in sample_names(text))
    values = samples(text)
    cluster = loaded.broker.cluster_name
    topic = (("cluster", cluster), ("namespace", "public/default"), ("topic", loaded.topic))
    stopped = tuple(sorted((*topic, ("subscription", "stopped"))))
    assert values[("pulsar_rate_in", topic)] > 0
    assert values[("pulsar_in_messages_total", topic)] >= 100
    assert values[("pulsar_subscription_back_log", stopped)] >= 100
    assert values[("pulsar_storage_write_latency_count", topic)] > 0
    assert values[("pulsar_entry_size_count", topic)] > 0
    verdict = tuple(sorted((*topic, ("verdict", "Dup"))))
    assert values[("dedup_broker_deduplication_verdicts_total", verdict)] == 1
    namespace = topic[:2]
    assert values[("dedup_broker_key_dedup_hits_total", namespace)] == 4
    assert values[("dedup_broker_key_dedup_misses_total", namespace)] == 1
    assert values[("dedup_broker_owned_slots", (("cluster", cluster),))] > 0


def test_storage_and_ack_rates_and_the_broker_sums_under_load(loaded: Loaded) -> None:
    """The busy topic writes, reads and acknowledges all along: its storage rates and its
    live subscription's acknowledgement rate are above zero, while the subscription
    without a consumer acknowledges nothing; each ``pulsar_broker_*`` family is its topic
    family summed over the topics of the same scrape."""
    cluster = loaded.broker.cluster_name
    topic = (("cluster", cluster), ("namespace", "public/default"), ("topic", loaded.topic))
    live = tuple(sorted((*topic, ("subscription", "live"))))
    busy = (
        ("pulsar_storage_write_rate", topic),
        ("pulsar_storage_read_rate", topic),
        ("pulsar_subscription_msg_ack_rate", live),
    )
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def all_busy() -> bool:
        found.clear()
        found.update(samples(scrape(loaded.broker.http_url)))
        return all(found.get(key, 0) > 0 for key in busy)

    wait_until(all_busy, 30, "storage and acknowledgement rates over one stats period")
    stopped = tuple(sorted((*topic, ("subscription", "stopped"))))
    assert found[("pulsar_subscription_msg_ack_rate", stopped)] == 0
    broker = (("cluster", cluster),)
    assert found[("pulsar_broker_topics_count", broker)] >= 2  # the busy and the keyed topic
    for name in BROKER_SUMS:
        total = sum(value for (family, _), value in found.items() if family == f"pulsar_{name}")
        assert found[(f"pulsar_broker_{name}", broker)] == pytest.approx(total), name


def test_the_worker_families_appear(loaded: Loaded) -> None:
    text = scrape(loaded.worker.http_url)
    assert exposed_families(text) == [(n, k) for n, k, _ in WORKER_FAMILIES]
    wait_until(lambda: "dedup_broker_ledger_deletion_lag{" in scrape(loaded.worker.http_url), 30)
    assert label_names(scrape(loaded.worker.http_url))["dedup_broker_ledger_deletion_lag"] == {
        "topic"
    }


def exported(loaded: Loaded) -> dict[str, str]:
    """Every family the broker and the worker expose: name on the TYPE line, type."""
    texts = [scrape(loaded.broker.http_url), scrape(loaded.worker.http_url)]
    return {name: kind for text in texts for name, kind in exposed_families(text)}


def test_the_metrics_page_lists_every_exported_family(loaded: Loaded) -> None:
    page = PAGE.read_text()
    assert [name for name in exported(loaded) if f"| `{name}` |" not in page] == []


def test_the_dashboard_reads_only_exported_families(loaded: Loaded) -> None:
    families = exported(loaded)
    for expression in dashboard_expressions():
        assert names_in(expression), expression
        assert unknown_names(expression, families) == set(), expression
