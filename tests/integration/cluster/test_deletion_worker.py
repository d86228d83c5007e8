"""Two-phase deletion in a cluster: the worker asks each topic's owner about its ledgers."""

from __future__ import annotations

import re
from pathlib import Path

import pulsar
from confluent_kafka.admin import AdminClient

from dedup_broker.app.deletion_worker import run_doctor as check
from dedup_broker.config import BrokerConfig
from harness.admin_http import http_request
from harness.cluster_processes import ClusterProcesses
from harness.worker_process import WorkerProcess
from tests.integration.cluster.conftest import SPREAD_BUNDLES, get_json, topic_on_each_broker
from tests.integration.system_topics.deletion_helpers import SMALL_LEDGERS, wait_until


def test_trimmed_ledgers_of_topics_on_both_brokers_are_deleted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = SMALL_LEDGERS | SPREAD_BUNDLES
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=2, settings=dict(settings))
    worker = WorkerProcess(kafka_bootstrap, cluster.cluster_name, dict(settings), tmp_path)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    pattern = re.compile(re.escape(cluster.cluster_name) + r"\.ledger\.(\d+)")

    def ledger_topics() -> set[int]:
        names = admin.list_topics(timeout=10).topics
        return {int(m.group(1)) for t in names if (m := pattern.fullmatch(t))}

    try:
        cluster.start()
        worker.start()
        owners = topic_on_each_broker(cluster, "persistent://public/default/dw-")
        topics = list(owners)
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        trimmed: list[int] = []
        try:
            for topic in topics:
                consumer = client.subscribe(topic, "sub")
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(30):
                    producer.send(b"m-%d" % i)
                owner = owners[topic]
                path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
                # Listed before the acknowledgements: the broker's own periodic trim may
                # remove consumed ledgers before the explicit trim below does.
                before = [x["ledgerId"] for x in internal(owner.http_url + path)["ledgers"]]
                for _ in range(25):
                    consumer.acknowledge(consumer.receive(10_000))
                consumer.close()
                status, body = http_request("POST", owner.http_url + path + "/trim")
                assert status == 204, body
                after = [x["ledgerId"] for x in internal(owner.http_url + path)["ledgers"]]
                gone = [ledger for ledger in before if ledger not in after]
                assert len(gone) >= 4, (before, after)
                trimmed += gone
            wait_until(lambda: not (ledger_topics() & set(trimmed)), what="ledgers deleted")
            for topic in topics:
                consumer = client.subscribe(topic, "sub")
                assert [consumer.receive(10_000).data() for _ in range(5)] == [
                    b"m-%d" % i for i in range(25, 30)
                ]
                consumer.close()
            # The doctor checks the whole cluster's ledgers and names its brokers.
            report = check(BrokerConfig.load(environ=cluster[0].environment()))
            assert report["orphans"] == [] and report["missing"] == [], report
            assert sorted(report["brokers"]) == sorted(b.service_url for b in cluster)
            assert report["unownedSlots"] == []
        finally:
            client.close()
    finally:
        worker.stop()
        cluster.stop()


def internal(url: str) -> dict[str, list[dict[str, int]]]:
    data = get_json(url + "/internalStats")
    assert isinstance(data, dict)
    return data
