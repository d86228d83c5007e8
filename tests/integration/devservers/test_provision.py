"""How servers are chosen and controlled: the environment first, a bounded Docker probe,
control refused where the process is not ours, the Kafka cache, and pid plumbing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient

from dedup_broker.devservers import (
    KafkaService,
    RedisService,
    distribution,
    provide_kafka,
    provide_redis,
    provision,
    unique_name,
)
from dedup_broker.devservers.containers import docker_available
from dedup_broker.devservers.kafka import server_properties
from dedup_broker.devservers.process import free_ports, pid_alive, stop_pid
from dedup_broker.errors import DevServerError

pytestmark = pytest.mark.timeout(300)


# --- selection ------------------------------------------------------------------------
def test_external_kafka_is_used_and_never_controlled(kafka_bootstrap: str) -> None:
    service = provide_kafka(environ={"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap})
    assert (service.kind, service.bootstrap_servers) == ("external", kafka_bootstrap)
    assert not service.controllable and service.pid is None and service.native is None
    with pytest.raises(DevServerError, match=r"cannot kill the external Kafka at "):
        service.kill()
    with pytest.raises(DevServerError, match=r"only a native Kafka is under"):
        service.start()
    service.stop()
    service.close()
    # Releasing the handle left the cluster alone.
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert len(metadata.brokers) >= 1


def test_unreachable_external_kafka_fails_without_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(provision, "EXTERNAL_CHECK_TIMEOUT_SECONDS", 2.0)
    (port,) = free_ports(1)
    started = time.monotonic()
    with pytest.raises(DevServerError, match=rf"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{port} is set"):
        provide_kafka(environ={"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    assert time.monotonic() - started < 10


def test_external_redis_is_used(redis_url: str) -> None:
    service = provide_redis(environ={"REDIS_URL": redis_url})
    assert (service.kind, service.url) == ("external", redis_url)
    with pytest.raises(DevServerError, match=r"cannot kill the external Redis"):
        service.kill()
    service.close()
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    assert client.ping() is True
    client.close()


def test_unreachable_external_redis_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provision, "EXTERNAL_CHECK_TIMEOUT_SECONDS", 1.0)
    (port,) = free_ports(1)
    with pytest.raises(DevServerError, match=rf"REDIS_URL=redis://127.0.0.1:{port}/0 is set"):
        provide_redis(environ={"REDIS_URL": f"redis://127.0.0.1:{port}/0"})


def test_invalid_mode_is_rejected() -> None:
    with pytest.raises(DevServerError, match=r"DEDUP_BROKER_DEV_SERVERS must be auto"):
        provide_redis(environ={"DEDUP_BROKER_DEV_SERVERS": "podman"})


def test_docker_only_mode_without_engine_lists_the_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DevServerError) as raised:
        provide_redis(environ={"DEDUP_BROKER_DEV_SERVERS": "docker"})
    assert str(raised.value) == (
        "no Redis available:\n- REDIS_URL is not set\n- no Docker engine answered"
    )


@pytest.mark.parametrize(
    "docker_host", ["unix:///nonexistent/docker.sock", "tcp://10.255.255.1:2375"]
)
def test_docker_probe_is_bounded(monkeypatch: pytest.MonkeyPatch, docker_host: str) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    started = time.monotonic()
    assert docker_available(timeout=1.0) is False
    assert time.monotonic() - started < 3.0


def test_native_redis_without_environment() -> None:
    service = provide_redis(environ={"DEDUP_BROKER_DEV_SERVERS": "native"})
    try:
        assert service.kind == "native" and service.controllable
        assert service.native is not None and service.url == service.native.url
        client = redis.Redis.from_url(service.url, socket_timeout=5)
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        client.close()
    finally:
        service.close()
    assert service.native is not None and not service.native.data_dir.exists()


def test_controllable_kafka_fixture_restarts_on_same_address(native_kafka: KafkaService) -> None:
    assert native_kafka.kind == "native" and native_kafka.controllable
    address, pid = native_kafka.bootstrap_servers, native_kafka.pid
    assert pid is not None
    native_kafka.kill()
    assert native_kafka.pid is None and not pid_alive(pid)
    native_kafka.start()
    assert native_kafka.bootstrap_servers == address and native_kafka.pid not in (None, pid)
    metadata = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
    assert len(metadata.brokers) == 1


def test_controllable_redis_fixture_is_a_fresh_server(native_redis: RedisService) -> None:
    assert native_redis.kind == "native"
    client = redis.Redis.from_url(native_redis.url, socket_timeout=5)
    assert client.dbsize() == 0
    client.close()


# --- the Kafka cache ------------------------------------------------------------------
def test_complete_cache_skips_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEDUP_BROKER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    home = tmp_path / "kafka-9.9.9"
    (home / "libs").mkdir(parents=True)
    (home / "libs" / "kafka_2.13-9.9.9.jar").write_bytes(b"")
    (home / ".complete").write_text("kafka 9.9.9\n")
    assert distribution.ensure_kafka("9.9.9") == home


def test_incomplete_cache_without_maven_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEDUP_BROKER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("DEDUP_BROKER_PROVISION", "none")  # nor a Maven fetched for it
    (tmp_path / "kafka-9.9.9" / "libs").mkdir(parents=True)
    (tmp_path / "kafka-9.9.9" / "libs" / "kafka_2.13-9.9.9.jar").write_bytes(b"")
    with pytest.raises(DevServerError, match=r"Kafka 9.9.9 is not in the cache at .* Maven"):
        distribution.ensure_kafka("9.9.9")


def test_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEDUP_BROKER_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert distribution.kafka_home("4.1.1") == tmp_path / ".cache/dedup-broker/kafka-4.1.1"
    monkeypatch.setenv("DEDUP_BROKER_CACHE_DIR", str(tmp_path / "c"))
    assert distribution.kafka_home("4.1.1") == tmp_path / "c" / "kafka-4.1.1"


# --- configuration, names, processes --------------------------------------------------
def test_server_properties_of_a_one_node_cluster(tmp_path: Path) -> None:
    props = server_properties(9192, 9193, tmp_path, {"log.retention.ms": "1000"})
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9193"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9192"
    assert props["process.roles"] == "broker,controller"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == str(tmp_path)
    assert props["log.retention.ms"] == "1000"


def test_unique_names() -> None:
    first, second = unique_name("topic.a_b"), unique_name("topic.a_b")
    assert first != second
    assert first.startswith("topic.a_b-") and len(first) == len("topic.a_b-") + 12
    with pytest.raises(ValueError, match="prefix"):
        unique_name("bad/name")


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        started = time.monotonic()
        stop_pid(child.pid, grace=0.5)
        assert 0.5 <= time.monotonic() - started < 10
        assert child.wait(5) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


def test_exited_unreaped_child_counts_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while pid_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child.pid)
    assert Path(f"/proc/{child.pid}").exists()  # still a zombie: not reaped yet
    assert child.wait(5) == 0
