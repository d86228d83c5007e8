"""Partitioned topics created through the admin API."""

from __future__ import annotations

import json
import uuid

import pulsar

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

RECEIVE_MS = 10_000


def test_four_partitions_keep_per_key_order(broker: BrokerProcess, client: pulsar.Client) -> None:
    name = f"p-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, b"4")[0] == 204
    assert json.loads(http_request("GET", path)[1]) == {"partitions": 4}
    assert http_request("PUT", path, b"4")[0] == 409

    consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    keys = [f"k{i}" for i in range(16)]
    for seq in range(50):
        for key in keys:
            producer.send_async(f"{key}:{seq}".encode(), None, partition_key=key)
    producer.flush()
    per_key: dict[str, list[int]] = {k: [] for k in keys}
    partitions_seen = set()
    for _ in range(50 * len(keys)):
        msg = consumer.receive(RECEIVE_MS)
        key, seq = msg.data().decode().split(":")
        per_key[key].append(int(seq))
        partitions_seen.add(msg.topic_name())
        consumer.acknowledge(msg)
    assert all(seqs == list(range(50)) for seqs in per_key.values())
    assert len(partitions_seen) == 4
    stats = json.loads(
        http_request(
            "GET", f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitioned-stats"
        )[1]
    )
    assert stats["msgInCounter"] == 50 * len(keys)
