"""Transactions of the official Java client on a 3-broker cluster: the coordinator on one
broker, the topics on others (endings sent between brokers), and kill -9 of the
coordinator's owner and of a topic's owner mid-transaction: every transaction ends
committed or aborted as a whole."""

from __future__ import annotations

import itertools
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from harness.pulsar_java_txn import JavaTransactions
from harness.pulsar_tools import run_pulsar_admin_batch, write_client_conf
from tests.integration.cluster.conftest import owner_of
from tests.integration.transactions.conftest import (
    abandon_then_see_it_aborted,
    subscribed,
    visible,
)

COORDINATOR = "persistent://pulsar/system/transaction_coordinator_assign-partition-0"


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ClusterProcesses]:
    brokers = ClusterProcesses(
        kafka_bootstrap, tmp_path, size=3, settings={"transaction_coordinator_enabled": True}
    )
    try:
        brokers.start()
        yield brokers
    finally:
        brokers.stop()


def served_by_other_brokers(cluster: ClusterProcesses, avoid: list[BrokerProcess]) -> str:
    """A new topic whose owner is none of ``avoid``."""
    for _ in itertools.count():
        topic = f"persistent://public/default/x-{uuid.uuid4().hex[:8]}"
        if owner_of(cluster, topic) not in avoid:
            return topic
    raise AssertionError("unreachable")


def test_a_transaction_ends_on_topics_other_brokers_serve(cluster: ClusterProcesses) -> None:
    coordinator = owner_of(cluster, COORDINATOR)
    source = served_by_other_brokers(cluster, [coordinator])
    sink = served_by_other_brokers(cluster, [coordinator, owner_of(cluster, source)])
    url = cluster.service_url
    with JavaTransactions(url) as java:
        for i in range(3):
            java.send_plain(source, f"in{i}")
        java.new()
        assert java.consume(source, "app", 3) == ["in0", "in1", "in2"]
        java.send(sink, "out0")
        java.abort()
        java.new()
        assert java.consume(source, "app", 3) == ["in0", "in1", "in2"]
        java.send(sink, "out1")
        java.commit()
    assert visible(url, sink) == ["out1"]
    assert subscribed(url, source, "app", 1000) == []


def test_kill_of_the_coordinators_owner_mid_transaction(cluster: ClusterProcesses) -> None:
    """The coordinator moves to another broker, recovered from its log: the client's
    commit, sent again there, ends the transaction whole."""
    coordinator = owner_of(cluster, COORDINATOR)
    sink = served_by_other_brokers(cluster, [coordinator])
    url = cluster.service_url
    with JavaTransactions(url) as java:
        java.new(timeout_seconds=120)
        java.send(sink, "a")
        java.send(sink, "b")
        coordinator.kill()
        assert visible(url, sink) == []
        java.commit()
    assert visible(url, sink) == ["a", "b"]
    assert owner_of(cluster, COORDINATOR) is not coordinator


def test_kill_of_a_topics_owner_mid_transaction(cluster: ClusterProcesses) -> None:
    """The topic's new owner recovers the open transaction from the topic: nothing is
    visible before the commit, everything after."""
    coordinator = owner_of(cluster, COORDINATOR)
    sink = served_by_other_brokers(cluster, [coordinator])
    topic_owner = owner_of(cluster, sink)
    url = cluster.service_url
    with JavaTransactions(url) as java:
        java.send_plain(sink, "before")
        java.new(timeout_seconds=120)
        java.send(sink, "a")
        topic_owner.kill()
        deadline = time.monotonic() + 60
        while owner_of(cluster, sink) is topic_owner:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        java.send(sink, "b")
        assert visible(url, sink) == ["before"]
        java.commit()
    assert visible(url, sink) == ["before", "a", "b"]


def test_pulsar_admin_transactions(cluster: ClusterProcesses, tmp_path: Path) -> None:
    """``pulsar-admin transactions`` against a broker that serves neither the coordinator
    nor the topics (307 to their owners): a transaction that wrote one topic and
    acknowledged on another, seen open, then committed."""
    coordinator = owner_of(cluster, COORDINATOR)
    source = served_by_other_brokers(cluster, [coordinator])
    sink = served_by_other_brokers(cluster, [coordinator, owner_of(cluster, source)])
    asked = next(b for b in cluster if b not in (coordinator, owner_of(cluster, sink)))
    conf = write_client_conf(tmp_path / "client.conf", cluster.service_url, asked.http_url)
    with JavaTransactions(cluster.service_url) as java:
        java.send_plain(source, "in0")
        most, least = java.new(timeout_seconds=120)
        assert java.consume(source, "app", 1) == ["in0"]
        java.send(sink, "out0")
        txn = ["-m", str(most), "-l", str(least)]
        open_view = run_pulsar_admin_batch(
            conf,
            [
                ["transactions", "coordinator-stats"],
                ["transactions", "coordinator-stats", "-c", "0"],
                ["transactions", "transaction-metadata", *txn],
                ["transactions", "slow-transactions", "-t", "0s"],
                ["transactions", "transaction-buffer-stats", "-t", sink],
                ["transactions", "transaction-in-buffer-stats", "-t", sink, *txn],
                ["transactions", "pending-ack-stats", "-t", source, "-s", "app"],
            ],
        )
        assert [o.exit_code for o in open_view] == [0] * 7, open_view
        every, one, metadata, slow, buffer, in_buffer, pending = (
            _printed(o.output) for o in open_view
        )
        # maps are printed a line per key: "<key>    <the value's toString()>"
        assert every.startswith("0    TransactionCoordinatorStats(state=Ready,")
        assert "ongoingTxnSize=1" in every
        assert one["ongoingTxnSize"] == 1
        assert slow.startswith(f"({most},{least})    TransactionMetadata(")
        assert "status=OPEN" in slow
        assert metadata["status"] == "OPEN" and metadata["txnId"] == f"({most},{least})"
        assert list(metadata["producedPartitions"]) == [sink]
        assert metadata["producedPartitions"][sink]["aborted"] is False
        assert list(metadata["ackedPartitions"]) == [source]
        assert buffer["ongoingTxnSize"] == 1
        assert in_buffer["startPosition"] is not None
        assert pending["ongoingTxnSize"] == 1
        java.commit()
    done = run_pulsar_admin_batch(
        conf,
        [
            ["transactions", "transaction-metadata", *txn],
            ["transactions", "coordinator-stats", "-c", "0"],
            ["transactions", "transaction-buffer-stats", "-t", sink],
        ],
    )
    assert [o.exit_code for o in done] == [0] * 3, done
    metadata, one, buffer = (_printed(o.output) for o in done)
    assert metadata["status"] == "COMMITTED"
    assert one["ongoingTxnSize"] == 0 and buffer["ongoingTxnSize"] == 0
    assert visible(cluster.service_url, sink) == ["out0"]
    with urllib.request.urlopen(coordinator.http_url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'pulsar_txn_committed_total{coordinator_id="0"} 1.0' in metrics
    assert 'pulsar_txn_active_count{coordinator_id="0"} 0.0' in metrics


def _printed(output: str) -> Any:
    """What pulsar-admin printed, less the logging's warnings: JSON, or the text of a map."""
    text = "\n".join(line for line in output.splitlines() if not line.startswith("SLF4J"))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def test_a_transaction_left_open_on_a_cluster_is_aborted_after_its_timeout(
    cluster: ClusterProcesses,
) -> None:
    """Its client dies: the coordinator, on one broker, aborts it once its timeout
    passes, on the topic another broker serves; what came after it becomes visible."""
    coordinator = owner_of(cluster, COORDINATOR)
    sink = served_by_other_brokers(cluster, [coordinator])
    url = cluster.service_url
    abandon_then_see_it_aborted(url, sink)
