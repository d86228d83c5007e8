"""A running broker's /metrics is valid Prometheus text with the families dashboards know."""

from __future__ import annotations

import urllib.request

import pulsar

from harness.broker_process import BrokerProcess
from tests.metric_names import BROKER_FAMILIES, exposed_families, sample_names


def test_metrics_parse_and_keep_their_names(
    broker: BrokerProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = response.read().decode()
    assert sorted(exposed_families(text)) == sorted(
        (name, kind) for name, kind, _ in BROKER_FAMILIES
    )
    samples = sample_names(text)
    assert {
        "pulsar_in_messages_total",
        "pulsar_connection_created_total_count",
        "pulsar_broker_publish_latency_seconds_bucket",
        "pulsar_broker_publish_latency_seconds_count",
        "dedup_broker_key_dedup_redis_round_trips_total",
    } <= samples
    assert not any(name.endswith("_created") for name in samples)
