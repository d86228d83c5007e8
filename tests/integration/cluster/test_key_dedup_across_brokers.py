"""Key-window deduplication with a namespace scope, its topics owned by different
brokers (Redis is shared): each key once, also through a kill -9 of one broker."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pulsar

from harness.admin_http import create_namespace, http_request
from harness.cluster_processes import ClusterProcesses
from harness.key_events import (
    KEY_PROPERTY,
    Publisher,
    make_events,
    producer_for,
    stored_event_ids,
)
from tests.integration.cluster.conftest import SPREAD_BUNDLES, topic_on_each_broker


def test_namespace_window_spans_brokers_and_a_kill(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    settings = {
        "redis_url": redis_url,
        "default_retention_time_in_minutes": -1,
        "default_retention_size_in_mb": -1,
        **SPREAD_BUNDLES,
    }
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=2, settings=settings)
    try:
        cluster.start()
        namespace = f"public/kdc-{uuid.uuid4().hex[:8]}"
        create_namespace(cluster[0].http_url, namespace, cluster[0].cluster_name)
        policy = {"enabled": True, "keySource": f"property:{KEY_PROPERTY}", "scope": "namespace"}
        status, body = http_request(
            "POST",
            f"{cluster[0].http_url}/admin/v2/namespaces/{namespace}/keyDeduplication",
            json.dumps(policy).encode(),
        )
        assert status == 204, body
        # Topics of the namespace on both brokers.
        owners = topic_on_each_broker(cluster, f"persistent://{namespace}/t-")
        topics = list(owners)
        events = make_events(4_000, 1_000, seed=11)
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=120)
        try:
            producers = [producer_for(client, t) for t in topics]
            publisher = Publisher(producers, events, rate=800).start()
            publisher.wait_for(2_000)
            victim = owners[topics[0]]
            victim.kill()
            victim.start()
            publisher.wait(timeout=300)
            stored = [e for t in topics for e in stored_event_ids(client, t)]
            counts = Counter(stored)
            assert [e for e, n in counts.items() if n > 1] == []
            assert set(counts) == set(events)
            assert all(stored_event_ids(client, t) for t in topics)
        finally:
            client.close()
    finally:
        cluster.stop()
