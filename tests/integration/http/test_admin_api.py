"""The admin REST API and /metrics reflect what happened on the wire."""

from __future__ import annotations

import json
import uuid

import pulsar

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

RECEIVE_MS = 10_000


def test_stats_internal_stats_subscriptions_and_delete(
    broker: BrokerProcess, client: pulsar.Client
) -> None:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    base = f"{broker.http_url}/admin/v2/persistent/public/default/{name}"
    consumer = client.subscribe(topic, "sub-a", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"{i}".encode())
    for _ in range(4):
        consumer.acknowledge(consumer.receive(RECEIVE_MS))

    status, body = http_request("GET", base + "/stats")
    stats = json.loads(body)
    assert status == 200
    assert stats["msgInCounter"] == 10
    assert len(stats["publishers"]) == 1
    assert stats["subscriptions"]["sub-a"]["type"] == "Exclusive"

    internal = json.loads(http_request("GET", base + "/internalStats")[1])
    assert internal["numberOfEntries"] == 10
    assert internal["ledgers"][0]["ledgerId"] == int(internal["lastConfirmedEntry"].split(":")[0])
    assert "sub-a" in internal["cursors"]

    assert json.loads(http_request("GET", base + "/subscriptions")[1]) == ["sub-a"]
    assert topic in json.loads(
        http_request("GET", f"{broker.http_url}/admin/v2/persistent/public/default")[1]
    )
    assert http_request("DELETE", base + "/subscription/sub-a")[0] == 409  # consumer connected
    consumer.close()
    assert http_request("DELETE", base + "/subscription/sub-a")[0] == 204
    assert json.loads(http_request("GET", base + "/subscriptions")[1]) == []
    producer.close()
    assert http_request("DELETE", base)[0] == 204
    assert http_request("GET", base + "/stats")[0] == 404
    assert (
        http_request("GET", f"{broker.http_url}/admin/v2/persistent/public/default/x/partitions")[0]
        == 200
    )
    assert http_request("PUT", base + "/partitions", b"not-a-number")[0] == 400


def test_metrics_count_messages_and_connections(
    broker: BrokerProcess, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/m-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(7):
        producer.send(b"12345")
    status, body = http_request("GET", broker.http_url + "/metrics")
    text = body.decode()
    assert status == 200
    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    labels = f'{{cluster="{broker.cluster_name}",namespace="public/default",topic="{topic}"}}'
    assert float(samples["pulsar_in_messages_total" + labels]) == 7
    assert float(samples["pulsar_active_connections"]) >= 1
    assert float(samples["pulsar_producers_count" + labels]) == 1
    assert float(samples["pulsar_broker_publish_latency_seconds_count"]) == 7
