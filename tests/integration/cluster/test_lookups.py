"""Three brokers on one Kafka: topics spread over them, any broker leads to every topic."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from harness.admin_http import http_request
from harness.cluster_processes import ClusterProcesses


@pytest.fixture(scope="module")
def cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterProcesses]:
    processes = ClusterProcesses(kafka_bootstrap, tmp_path_factory.mktemp("cluster"), size=3)
    try:
        processes.start()
        yield processes
    finally:
        processes.stop()


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_brokers_and_bundles_are_listed(cluster: ClusterProcesses) -> None:
    expected = sorted(f"127.0.0.1:{b.http_port}" for b in cluster)
    for broker in cluster:
        assert get_json(f"{broker.http_url}/admin/v2/brokers/{cluster.cluster_name}") == expected
        assert get_json(f"{broker.http_url}/admin/v2/clusters") == [cluster.cluster_name]
    bundles = get_json(f"{cluster[0].http_url}/admin/v2/namespaces/public/default/bundles")
    assert bundles == {
        "numBundles": 4,
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
    }


def owner_port(cluster: ClusterProcesses, topic: str) -> int:
    local = topic.rsplit("/", 1)[-1]
    data = get_json(f"{cluster[0].http_url}/lookup/v2/topic/persistent/public/default/{local}")
    assert isinstance(data, dict)
    return int(str(data["brokerUrl"]).rsplit(":", 1)[-1])


@pytest.mark.parametrize("via", ["binary", "http"])
def test_every_topic_through_any_broker(cluster: ClusterProcesses, via: str) -> None:
    topics = [f"persistent://public/default/spread-{uuid.uuid4().hex[:8]}" for _ in range(12)]
    owners = {owner_port(cluster, t) for t in topics}
    assert len(owners) >= 2, "12 topics should not all hash to one broker"
    for entry in cluster:
        url = entry.service_url if via == "binary" else entry.http_url
        client = pulsar.Client(url, operation_timeout_seconds=30)
        try:
            for topic in topics:
                consumer = client.subscribe(topic, f"s-{entry.port}")
                producer = client.create_producer(topic)
                producer.send(f"{topic} via {entry.port}".encode())
                assert consumer.receive(timeout_millis=20000).data() == (
                    f"{topic} via {entry.port}".encode()
                )
                producer.close()
                consumer.close()
        finally:
            client.close()


def test_admin_calls_redirect_to_the_owner(cluster: ClusterProcesses) -> None:
    topic = f"persistent://public/default/adm-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(cluster[0].service_url, operation_timeout_seconds=30)
    try:
        client.create_producer(topic).send(b"x")
    finally:
        client.close()
    port = owner_port(cluster, topic)
    owner = next(b for b in cluster if b.port == port)
    other = next(b for b in cluster if b.port != port)
    local = topic.rsplit("/", 1)[-1]
    path = f"/admin/v2/persistent/public/default/{local}/stats"
    request = urllib.request.Request(other.http_url + path)
    opener = urllib.request.build_opener(NoRedirect())
    with pytest.raises(urllib.error.HTTPError) as caught:
        opener.open(request, timeout=10)
    assert caught.value.code == 307
    assert caught.value.headers["Location"] == owner.http_url + path
    stats = get_json(other.http_url + path)  # urllib follows the redirect
    assert isinstance(stats, dict) and stats["msgInCounter"] == 1


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_partitioned_topics_span_brokers_and_any_broker_manages_them(
    cluster: ClusterProcesses,
) -> None:
    local = f"parts-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    base = f"/admin/v2/persistent/public/default/{local}"
    status, body = http_request("PUT", cluster[1].http_url + base + "/partitions", b"8")
    assert status == 204, body
    assert get_json(cluster[2].http_url + base + "/partitions") == {"partitions": 8}
    owners = {owner_port(cluster, f"{topic}-partition-{i}") for i in range(8)}
    assert len(owners) >= 2, "8 partitions should not all hash to one broker"
    client = pulsar.Client(cluster[0].service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            batching_enabled=False,
        )
        for i in range(16):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()
    # Any broker sums the partitions' stats, asking each partition's owner.
    stats = get_json(cluster[0].http_url + base + "/partitioned-stats")
    assert isinstance(stats, dict)
    assert stats["msgInCounter"] == 16
    assert len(stats["partitions"]) == 8
    # And any broker deletes it: each partition through its owner, then the metadata.
    status, body = http_request("DELETE", cluster[2].http_url + base + "/partitions")
    assert status == 204, body
    assert get_json(cluster[0].http_url + base + "/partitions") == {"partitions": 0}
    topics = get_json(cluster[0].http_url + "/admin/v2/persistent/public/default")
    assert isinstance(topics, list)
    assert not [t for t in topics if local in t]
