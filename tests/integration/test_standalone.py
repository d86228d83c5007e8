"""``dedup-broker standalone`` as a user runs it: one command, the official client against
the URLs it prints, Ctrl-C, and nothing it started left running."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
import redis
from confluent_kafka.admin import AdminClient

import dedup_broker
from dedup_broker.config import ENV_PREFIX
from dedup_broker.devservers.process import free_ports, pid_alive, wait_until

pytestmark = pytest.mark.timeout(480)

READY_TIMEOUT = 240.0
"""A native Kafka's first start may include resolving its jars."""
STOP_TIMEOUT = 90.0
"""Every stop is bounded (broker 30 s, worker 15 s, Redis and Kafka 30 s each)."""
READY_LINE = "Ctrl-C (or SIGTERM) stops them all."
PROCESS_LINE = re.compile(r"\s+(kafka|redis|broker|deletion-worker)\s+pid (\d+)\s+log .+")
MESSAGES = [f"standalone-{i}".encode() for i in range(5)]

# The command runs in a scratch directory; it must import the code under test.
_SOURCE_ROOT = str(Path(dedup_broker.__file__).resolve().parents[1])


class Standalone:
    """One ``dedup-broker standalone`` process, its output read line by line as it comes."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.lines: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        with (cwd / f"standalone-{uuid.uuid4().hex[:6]}.err").open("w") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dedup_broker.app.cli", "standalone", *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, name="standalone-out", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, wanted: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while wanted not in self.lines:
                remaining = deadline - time.monotonic()
                assert not self._ended, f"exited before {wanted!r}:\n{self.output}"
                assert remaining > 0, f"no {wanted!r} within {timeout:.0f} s:\n{self.output}"
                self._changed.wait(min(remaining, 1.0))

    def wait(self, timeout: float) -> int:
        """The exit code, once the process ended and all its output was read."""
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def value(self, label: str) -> str:
        """The value printed after ``label:`` (without a trailing ``(origin)``)."""
        for line in self.lines:
            match = re.fullmatch(rf"\s+{re.escape(label)}:\s+(\S+)(?: \((.+)\))?", line)
            if match:
                return match.group(1)
        raise AssertionError(f"no {label!r} line:\n{self.output}")

    def origin(self, label: str) -> str:
        for line in self.lines:
            match = re.fullmatch(rf"\s+{re.escape(label)}:\s+\S+ \((.+)\)", line)
            if match:
                return match.group(1)
        raise AssertionError(f"no {label!r} line:\n{self.output}")

    def pids(self) -> dict[str, int]:
        """The processes standalone says it started, by role."""
        found = {}
        for line in self.lines:
            match = re.fullmatch(
                r"\s+(kafka|redis|broker|deletion-worker)\s+pid (\d+)\s+log .+", line
            )
            if match:
                found[match.group(1)] = int(match.group(2))
        return found

    def interrupt(self) -> int:
        """Ctrl-C; the exit code, which must come within ``STOP_TIMEOUT``."""
        self.process.send_signal(signal.SIGINT)
        return self.wait(STOP_TIMEOUT)

    def kill_leftovers(self) -> None:
        """After a failed test: SIGKILL standalone and anything it started that still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        for pid in self.pids().values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda pid=pid: not pid_alive(pid), 15)  # type: ignore[misc]


StartStandalone = Callable[..., Standalone]


@pytest.fixture
def start_standalone(tmp_path: Path) -> Iterator[StartStandalone]:
    """``start_standalone(*args, external={...})``: run it until it prints its URLs."""
    started: list[Standalone] = []

    def start(*args: str, external: dict[str, str] | None = None) -> Standalone:
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
        env.pop("REDIS_URL", None)
        env.update(external or {})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_SOURCE_ROOT, env.get("PYTHONPATH")]))
        run = Standalone(list(args), env, tmp_path)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill_leftovers()


def _broker_settings(broker_port: int, web_port: int, worker_port: int) -> list[str]:
    cluster = f"sa-{uuid.uuid4().hex[:10]}"
    settings = {
        "clusterName": cluster,
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        "brokerServicePort": broker_port,
        "webServicePort": web_port,
        "deletionWorkerWebServicePort": worker_port,
        # The Kafka may be shared with other tests: deletion topics of this cluster's own.
        "twoPhaseDeletionTopic": f"{cluster}.__ledger_deletion",
        "twoPhaseDeletionRetryTopic": f"{cluster}.__ledger_deletion-RETRY",
        "twoPhaseDeletionDeadLetterTopic": f"{cluster}.__ledger_deletion-DLQ",
    }
    return [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]


def _produce_and_consume(service_url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic)
        for message in MESSAGES:
            producer.send(message)
        consumer = client.subscribe(
            topic, "standalone-test", initial_position=pulsar.InitialPosition.Earliest
        )
        received = []
        for _ in MESSAGES:
            message = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(message)
            received.append(message.data())
        return received
    finally:
        client.close()


def _read_all(service_url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            stored.append(reader.read_next(timeout_millis=30_000).data())
        return stored
    finally:
        client.close()


def _health(web_service_url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(web_service_url + "/admin/v2/brokers/health", timeout=10) as r:
        return r.status, r.read()


def _stop_lines(run: Standalone) -> list[str]:
    return [line for line in run.lines if line.startswith("standalone: stopped the ")]


def _assert_all_gone(pids: dict[str, int]) -> None:
    alive = {role: pid for role, pid in pids.items() if pid_alive(pid)}
    assert alive == {}


def test_standalone_on_existing_kafka_and_redis(
    start_standalone: StartStandalone, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    broker_port, web_port, worker_port = free_ports(3)
    run = start_standalone(
        "--data-dir",
        str(tmp_path / "data"),
        *_broker_settings(broker_port, web_port, worker_port),
        external={"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "REDIS_URL": redis_url},
    )
    run.wait_for_line(READY_LINE, READY_TIMEOUT)

    assert run.value("Pulsar service URL") == f"pulsar://127.0.0.1:{broker_port}"
    assert run.value("HTTP service URL") == f"http://127.0.0.1:{web_port}"
    assert run.value("Kafka bootstrap") == kafka_bootstrap
    assert run.origin("Kafka bootstrap") == "external"
    assert run.value("Redis URL") == redis_url
    assert run.origin("Redis URL") == "external"
    pids = run.pids()
    assert sorted(pids) == ["broker", "deletion-worker"]
    assert _health(run.value("HTTP service URL")) == (200, b"ok")
    topic = f"persistent://public/default/sa-{uuid.uuid4().hex[:8]}"
    assert _produce_and_consume(run.value("Pulsar service URL"), topic) == MESSAGES

    assert run.interrupt() == 0, run.output
    _assert_all_gone(pids)
    assert _stop_lines(run) == [
        f"standalone: stopped the broker (pid {pids['broker']})",
        f"standalone: stopped the deletion-worker (pid {pids['deletion-worker']})",
    ]
    # What it did not start, it leaves running.
    assert redis.Redis.from_url(redis_url).ping()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert admin.list_topics(timeout=10).brokers


def test_standalone_starts_its_own_kafka_and_redis_and_keeps_their_data(
    start_standalone: StartStandalone, tmp_path: Path
) -> None:
    kafka_port, controller_port, redis_port, broker_port, web_port, worker_port = free_ports(6)
    args = [
        "--data-dir",
        str(tmp_path / "data"),
        "--kafka-port",
        str(kafka_port),
        "--kafka-controller-port",
        str(controller_port),
        "--redis-port",
        str(redis_port),
        *_broker_settings(broker_port, web_port, worker_port),
    ]
    topic = f"persistent://public/default/sa-{uuid.uuid4().hex[:8]}"

    first = start_standalone(*args)
    first.wait_for_line(READY_LINE, READY_TIMEOUT)
    assert first.value("Kafka bootstrap") == f"127.0.0.1:{kafka_port}"
    assert first.origin("Kafka bootstrap") == "started here"
    assert first.value("Redis URL") == f"redis://127.0.0.1:{redis_port}/0"
    assert first.origin("Redis URL") == "started here"
    pids = first.pids()
    assert sorted(pids) == ["broker", "deletion-worker", "kafka", "redis"]
    assert _produce_and_consume(first.value("Pulsar service URL"), topic) == MESSAGES
    redis.Redis.from_url(first.value("Redis URL")).set("standalone-test", "kept")

    assert first.interrupt() == 0, first.output
    _assert_all_gone(pids)
    assert _stop_lines(first) == [
        f"standalone: stopped the broker (pid {pids['broker']})",
        f"standalone: stopped the deletion-worker (pid {pids['deletion-worker']})",
        f"standalone: stopped the redis (pid {pids['redis']})",
        f"standalone: stopped the kafka (pid {pids['kafka']})",
    ]

    # Started again on the same data directory: the topic and the Redis key are back.
    second = start_standalone(*args)
    second.wait_for_line(READY_LINE, READY_TIMEOUT)
    assert _read_all(second.value("Pulsar service URL"), topic) == MESSAGES
    assert redis.Redis.from_url(second.value("Redis URL")).get("standalone-test") == b"kept"
    pids = second.pids()
    assert second.interrupt() == 0, second.output
    _assert_all_gone(pids)


def test_standalone_stops_everything_and_fails_when_a_child_dies(
    start_standalone: StartStandalone, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    run = start_standalone(
        "--data-dir",
        str(tmp_path / "data"),
        *_broker_settings(*free_ports(3)),
        external={"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "REDIS_URL": redis_url},
    )
    run.wait_for_line(READY_LINE, READY_TIMEOUT)
    pids = run.pids()

    os.kill(pids["deletion-worker"], signal.SIGKILL)

    assert run.wait(STOP_TIMEOUT) == 1
    _assert_all_gone(pids)
    expected = (
        f"standalone: error: the deletion-worker (pid {pids['deletion-worker']}) stopped "
        "unexpectedly (killed by SIGKILL); log "
    )
    assert any(line.startswith(expected) for line in run.lines), run.output
    assert f"standalone: stopped the broker (pid {pids['broker']})" in run.lines
    assert run.lines[-1] == "standalone: exiting with code 1"


def test_standalone_names_a_taken_port_before_starting_anything(
    start_standalone: StartStandalone, tmp_path: Path
) -> None:
    kafka_port, controller_port, redis_port, web_port, worker_port = free_ports(5)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker_port = taken.getsockname()[1]
        run = start_standalone(
            "--data-dir",
            str(tmp_path / "data"),
            "--kafka-port",
            str(kafka_port),
            "--kafka-controller-port",
            str(controller_port),
            "--redis-port",
            str(redis_port),
            *_broker_settings(broker_port, web_port, worker_port),
        )
        assert run.wait(60) == 1
    assert run.pids() == {}
    assert (
        f"standalone: error: port(s) already in use on 127.0.0.1: {broker_port} "
        "(brokerServicePort); stop what holds them or choose others "
        "(--set brokerServicePort=..., --kafka-port ..., ...)"
    ) in run.lines, run.output
    assert not (tmp_path / "data" / "kafka").exists()
