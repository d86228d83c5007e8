"""The pure parts of the container tier: apt sources, Kafka's environment, compose files."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from dedup_broker.devservers import containers
from dedup_broker.devservers.compose_local import COMPOSE_FILE, without_published_ports
from dedup_broker.devservers.containers import kafka_environment, kafka_node_properties
from dedup_broker.devservers.images import apt_sources


def test_apt_sources_of_both_formats(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# a comment\n"
        "deb [arch=amd64] http://mirror.example/debian/ bookworm main contrib\n"
        "deb-src http://mirror.example/debian bookworm main\n"
        "deb http://mirror.example/debian bullseye main\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n"
        "# http://snapshot.example/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "\n"
        "Types: deb\n"
        "URIs: http://deb.example/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
        "\n"
        "Types: deb\n"
        "URIs: http://disabled.example/debian\n"
        "Suites: bookworm\n"
        "Components: main\n"
        "Enabled: no\n"
    )
    (tmp_path / "sources.list.d" / "other.list.disabled").write_text(
        "deb http://ignored.example/debian bookworm main\n"
    )
    assert apt_sources("bookworm", tmp_path) == [
        ("http://mirror.example/debian", "bookworm"),
        ("http://deb.example/debian", "bookworm"),
        ("http://deb.example/debian", "bookworm-updates"),
        ("http://deb.example/debian-security", "bookworm-security"),
    ]


def _decode(name: str) -> str:
    """The Kafka images' rule (docker/local/kafka-run.sh, like apache/kafka's)."""
    key = name.removeprefix("KAFKA_").replace("___", "-").replace("__", "%")
    return key.replace("_", ".").replace("%", "_").lower()


def test_kafka_properties_survive_the_environment() -> None:
    props = kafka_node_properties(2, [9092, 9094, 9096], [9093, 9095, 9097])
    props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = "x"
    props["some-dashed.key"] = "y"
    env = kafka_environment(props)
    assert {_decode(name): value for name, value in env.items()} == props
    assert env["KAFKA_NODE_ID"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"
    )
    assert props["min.insync.replicas"] == "2" and props["default.replication.factor"] == "3"


def test_three_nodes_replicate_and_one_node_does_not() -> None:
    single = kafka_node_properties(1, [9092], [9093])
    assert single["offsets.topic.replication.factor"] == "1"
    assert single["min.insync.replicas"] == "1"


def test_the_local_compose_file_keeps_everything_but_the_published_ports() -> None:
    text = COMPOSE_FILE.read_text()
    assert re.search(r"(?m)^\s+ports:", text) and re.search(r"(?m)^name:", text)
    stripped = without_published_ports(text, drop_name=True)
    assert not re.search(r"(?m)^\s+ports:", stripped)
    assert not re.search(r'(?m)^\s+- "\d+:\d+"', stripped)
    assert not re.search(r"(?m)^name:", stripped)
    services = re.findall(r"(?m)^  ([a-z0-9-]+):$", text)
    assert services == re.findall(r"(?m)^  ([a-z0-9-]+):$", stripped)
    assert {"kafka-1", "kafka-2", "kafka-3", "broker-1", "deletion-worker"} <= set(services)
    assert re.search(r"(?m)^name:", without_published_ports(text, drop_name=False))
    assert "healthcheck:" in stripped and "DEDUP_BROKER_WEB_SERVICE_PORT" in stripped


def test_a_cluster_id_never_starts_like_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """One random id in 64 starts with '-' in base64url; kafka-storage format refused it."""
    assert all(not containers.new_cluster_id().startswith("-") for _ in range(2_000))
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(containers.uuid, "uuid4", lambda: next(drawn))
    assert containers.new_cluster_id() == "EAAAAAAAAAAAAAAAAAAAAA"
