"""docker/compose.yaml brought up as users run it (three Kafka nodes, three brokers, Redis,
the deletion worker), with docker/compose.local.yaml for the images built here and host
networking (``compose_local``: compose.yaml without its published ports). Deduplication
is switched on through the admin API; the official client publishes through the brokers
while the container of the broker serving the topic and then the Kafka node leading its
ledger are killed; every acknowledged message is stored once."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from dedup_broker.devservers import compose_local, process
from dedup_broker.errors import DevServerError
from tests.containers import traffic

CLUSTER_NAME = "standalone"
"""compose.yaml's ``DEDUP_BROKER_CLUSTER_NAME``."""
TOTAL = 1500
PER_SECOND = 150.0
UP_TIMEOUT = 420


class Stack:
    """One compose project of the two files, on free loopback ports."""

    def __init__(self, work: Path) -> None:
        self.project = f"dedupct{uuid.uuid4().hex[:8]}"
        ports = iter(process.free_ports(14))
        self.kafka = {n: (next(ports), next(ports)) for n in (1, 2, 3)}
        self.brokers = {n: (next(ports), next(ports)) for n in (1, 2, 3)}
        self.env = dict(os.environ)
        for n, (port, controller) in self.kafka.items():
            self.env[f"DEDUP_LOCAL_KAFKA_{n}_PORT"] = str(port)
            self.env[f"DEDUP_LOCAL_KAFKA_{n}_CONTROLLER_PORT"] = str(controller)
        for n, (port, web) in self.brokers.items():
            self.env[f"DEDUP_LOCAL_BROKER_{n}_PORT"] = str(port)
            self.env[f"DEDUP_LOCAL_WEB_{n}_PORT"] = str(web)
        self.env["DEDUP_LOCAL_REDIS_PORT"] = str(next(ports))
        self.env["DEDUP_LOCAL_WORKER_WEB_PORT"] = str(next(ports))
        self.env["DEDUP_LOCAL_OWNER_PID"] = str(os.getpid())
        try:
            command = compose_local.compose_command()
        except DevServerError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.command = compose_local.compose_arguments(command, work, self.project)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port, _ in self.kafka.values())

    @property
    def http_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{web}" for _, web in self.brokers.values()]

    def run(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [*self.command, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, f"compose {' '.join(args)}:\n{result.stderr[-4000:]}"
        return result.stdout

    def kill(self, service: str) -> None:
        self.run("kill", "-s", "SIGKILL", service)

    def wait_for_brokers(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        for url in self.http_urls:
            while not _healthy(url):
                assert time.monotonic() < deadline, f"broker {url} not healthy:\n{self.logs()}"
                time.sleep(0.5)

    def enable_deduplication(self, namespace: str, timeout: float = 60) -> None:
        """PIP-6 for ``namespace`` through one broker's admin API (compose.yaml keeps
        Pulsar's default, off), then until every broker reports it."""
        path = f"/admin/v2/namespaces/{namespace}/deduplication"
        request = urllib.request.Request(
            self.http_urls[0] + path,
            data=b"true",
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status in (200, 204)
        deadline = time.monotonic() + timeout
        for url in self.http_urls:
            while True:
                with urllib.request.urlopen(url + path, timeout=10) as reply:
                    if reply.read().strip() == b"true":
                        break
                assert time.monotonic() < deadline, f"{url}: deduplication not applied"
                time.sleep(0.5)

    def running_services(self) -> set[str]:
        return set(self.run("ps", "--services", "--filter", "status=running").split())

    def logs(self) -> str:
        try:
            return self.run("logs", "--tail", "15", timeout=60)[-6000:]
        except AssertionError as exc:
            return str(exc)


def _healthy(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(http_url + "/admin/v2/brokers/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@pytest.fixture
def stack(docker_engine: None, tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        stack.run("up", "-d", "--no-build", timeout=UP_TIMEOUT)
        stack.wait_for_brokers()
        yield stack
    finally:
        stack.run("down", "--volumes", "--timeout", "5", timeout=180)


def test_compose_stack_loses_nothing_when_a_broker_and_a_kafka_node_die(
    stack: Stack,
) -> None:
    assert "deletion-worker" in stack.running_services()
    stack.enable_deduplication("public/default")
    topic = f"persistent://public/default/{traffic.unique('compose')}"
    hosts = ",".join(f"127.0.0.1:{port}" for port, _ in stack.brokers.values())
    clients: list[pulsar.Client] = [traffic.client(f"pulsar://{hosts}")]
    try:
        publisher = traffic.SteadyPublisher(clients[0], topic, "compose", TOTAL, PER_SECOND)
        publisher.start().wait_for(TOTAL // 3, timeout=120)

        owner_port = traffic.owner_port(stack.http_urls, topic)
        owner = next(n for n, (port, _) in stack.brokers.items() if port == owner_port)
        stack.kill(f"broker-{owner}")
        publisher.wait_for(2 * TOTAL // 3, timeout=180)

        node = traffic.ledger_leader(stack.bootstrap_servers, CLUSTER_NAME)
        stack.kill(f"kafka-{node}")
        publisher.wait_all(timeout=240)
        assert not publisher.errors, publisher.errors[:5]

        survivor = next(port for n, (port, _) in stack.brokers.items() if n != owner)
        clients.append(traffic.client(f"pulsar://127.0.0.1:{survivor}"))
        traffic.assert_exactly_once(traffic.read_all(clients[-1], topic), TOTAL)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        for client in clients:
            client.close()
