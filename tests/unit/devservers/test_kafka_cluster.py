"""The configuration of a development Kafka cluster's nodes."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from dedup_broker.devservers.kafka import random_cluster_id, server_properties
from dedup_broker.devservers.kafka_cluster import NativeKafkaCluster, replicated_properties
from dedup_broker.errors import DevServerError


def test_nodes_share_one_quorum_and_are_replicated_as_in_production(tmp_path: Path) -> None:
    cluster = NativeKafkaCluster(
        tmp_path, nodes=3, ports=[9192, 9194, 9196], controller_ports=[9193, 9195, 9197]
    )
    assert cluster.bootstrap_servers == "127.0.0.1:9192,127.0.0.1:9194,127.0.0.1:9196"
    node = cluster.node(2)
    props = server_properties(
        node.port,
        node.controller_port,
        node.log_dir,
        node.extra_properties,
        node_id=node.node_id,
        quorum_voters=node.quorum_voters,
    )
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9193,2@127.0.0.1:9195,3@127.0.0.1:9197"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9194,CONTROLLER://127.0.0.1:9195"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    assert node.log_dir == tmp_path / "node-2" / "data"


def test_a_smaller_cluster_keeps_one_replica_spare() -> None:
    assert replicated_properties(2)["default.replication.factor"] == "2"
    assert replicated_properties(2)["min.insync.replicas"] == "1"
    assert replicated_properties(5)["default.replication.factor"] == "3"


def test_a_disk_of_fixed_size_needs_root_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(DevServerError, match="tmpfs mount, and mounting needs root"):
        NativeKafkaCluster(tmp_path, nodes=3, disk_size="512m")


def test_only_a_cluster_with_disks_fills_one(tmp_path: Path) -> None:
    with pytest.raises(DevServerError, match="started with disk_size"):
        NativeKafkaCluster(tmp_path, nodes=3).fill_disk(1)


def test_a_cluster_id_has_the_form_kafkas_random_uuid_prints() -> None:
    ids = {random_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
