"""The native launchers start real servers, stop them without leftovers, and restart them
on the same address and data. Each test runs its own Kafka/Redis, apart from the session's."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from dedup_broker.devservers import NativeKafka, NativeRedis, unique_name
from dedup_broker.devservers.distribution import find_java
from dedup_broker.devservers.process import pid_alive, port_accepts, port_bindable

Record = tuple[bytes | None, bytes | None, int | None]
"""(key, value, offset) of one consumed record."""

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[NativeKafka]:
    launcher = NativeKafka(tmp_path / "kafka", startup_timeout=90)
    yield launcher
    launcher.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[NativeRedis]:
    launcher = NativeRedis(tmp_path / "redis")
    yield launcher
    launcher.close()


def assert_gone(pid: int, ports: list[int]) -> None:
    assert not pid_alive(pid)
    assert not Path(f"/proc/{pid}").exists()
    for port in ports:
        assert not port_accepts(port)
        assert port_bindable(port)


def g1_region_bytes(pid: int) -> int:
    """The G1 region size the running JVM ``pid`` uses, as its own ``jcmd`` reports it."""
    jcmd = Path(os.path.realpath(find_java())).with_name("jcmd")
    flags = subprocess.run(
        [str(jcmd), str(pid), "VM.flags"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found = re.search(r"-XX:G1HeapRegionSize=(\d+)", flags)
    assert found is not None, flags
    return int(found.group(1))


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(timeout=60)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(60) == 0


def read_all(bootstrap: str, topic: str, expected: int) -> list[Record]:
    """Every record of partition 0 from offset 0, stopping at end of partition (bounded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    received: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                received.append((msg.key(), msg.value(), msg.offset()))
            elif error.code() != KafkaError._PARTITION_EOF:
                continue  # the broker may still be loading the partition
            elif len(received) >= expected:
                break
    finally:
        consumer.close()
    return received


def test_kafka_starts_serves_and_stops_without_leftovers(kafka: NativeKafka) -> None:
    kafka.start()
    pid = kafka.pid
    assert pid is not None and pid_alive(pid)
    assert kafka.bootstrap_servers == f"127.0.0.1:{kafka.port}"
    assert g1_region_bytes(pid) == 16 * 1024 * 1024  # no ledger batch allocated humongous
    metadata = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=10)
    assert [f"{b.host}:{b.port}" for b in metadata.brokers.values()] == [kafka.bootstrap_servers]
    topic = unique_name("launcher")
    create_topic(kafka.bootstrap_servers, topic)
    assert (
        topic
        in AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        .list_topics(timeout=10)
        .topics
    )

    kafka.stop()

    assert kafka.pid is None and not kafka.running
    assert_gone(pid, [kafka.port, kafka.controller_port])


def test_kafka_restarts_on_same_address_with_its_data(kafka: NativeKafka) -> None:
    kafka.start()
    first_pid = kafka.pid
    assert first_pid is not None
    address = kafka.bootstrap_servers
    topic = unique_name("restart")
    create_topic(address, topic)
    produce(address, topic, [(b"k", b"before stop")])

    kafka.stop()
    assert_gone(first_pid, [kafka.port, kafka.controller_port])
    kafka.start()

    second_pid = kafka.pid
    assert second_pid is not None and second_pid != first_pid
    assert kafka.bootstrap_servers == address
    produce(address, topic, [(b"k", b"after restart")])
    assert read_all(address, topic, 2) == [(b"k", b"before stop", 0), (b"k", b"after restart", 1)]

    kafka.kill()
    assert_gone(second_pid, [kafka.port, kafka.controller_port])
    kafka.start()
    assert read_all(address, topic, 2) == [(b"k", b"before stop", 0), (b"k", b"after restart", 1)]


def test_redis_without_persistence_loses_keys_on_restart(redis_server: NativeRedis) -> None:
    redis_server.start()
    pid = redis_server.pid
    assert pid is not None
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    assert client.ping() is True
    assert client.set("dedup:k", b"v") is True
    assert client.get("dedup:k") == b"v"
    client.close()

    redis_server.stop()
    assert_gone(pid, [redis_server.port])

    redis_server.start()
    assert redis_server.pid not in (None, pid)
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    assert client.get("dedup:k") is None
    assert client.dbsize() == 0
    client.close()


def test_persistent_redis_keeps_keys_through_sigkill(tmp_path: Path) -> None:
    launcher = NativeRedis(tmp_path / "redis-aof", persistent=True)
    try:
        launcher.start()
        client = redis.Redis.from_url(launcher.url, socket_timeout=5)
        assert client.set("dedup:k", b"kept", ex=600) is True
        client.close()
        pid = launcher.pid
        assert pid is not None

        launcher.kill()
        assert_gone(pid, [launcher.port])
        launcher.start()

        client = redis.Redis.from_url(launcher.url, socket_timeout=5)
        assert client.get("dedup:k") == b"kept"
        assert 0 < client.ttl("dedup:k") <= 600
        client.close()
    finally:
        launcher.close()
