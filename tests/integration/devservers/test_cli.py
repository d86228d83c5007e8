"""``dev kafka-up/-down``, ``redis-up/-down`` and ``status`` as a user runs them: separate
processes, servers left running in between, found again through their pid files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient

import dedup_broker
from dedup_broker.devservers.process import (
    free_ports,
    pid_alive,
    port_accepts,
    read_pid_file,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)


# The commands run in other directories; they must import the code under test.
_SOURCE_ROOT = str(Path(dedup_broker.__file__).resolve().parents[1])


def dev(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [_SOURCE_ROOT, os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "dedup_broker.devservers.cli", "dev", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory; any server a failed test left behind is killed by its pid."""
    yield tmp_path
    for pid_file in tmp_path.rglob("*.pid"):
        pid = read_pid_file(pid_file)
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda pid=pid: not pid_alive(pid), 15)  # type: ignore[misc]


def test_kafka_up_status_down(workdir: Path) -> None:
    port, controller_port = free_ports(2)
    data_dir = workdir / "kafka"
    up = dev(
        "kafka-up",
        "--port",
        port,
        "--controller-port",
        controller_port,
        "--data-dir",
        data_dir,
        cwd=workdir,
    )
    assert up.returncode == 0, up.stderr
    assert up.stdout == f"127.0.0.1:{port}\n"
    pid = read_pid_file(data_dir / "kafka.pid")
    assert pid is not None and pid_alive(pid)
    # The command has exited; the detached server still serves.
    metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
    assert [b.port for b in metadata.brokers.values()] == [port]

    again = dev("kafka-up", "--port", port, "--data-dir", data_dir, cwd=workdir)
    assert again.returncode == 0
    assert again.stdout == f"127.0.0.1:{port}\n"
    assert f"already running at 127.0.0.1:{port} (pid {pid})" in again.stderr

    status = dev(
        "status", "--kafka-data-dir", data_dir, "--redis-data-dir", workdir / "r", cwd=workdir
    )
    assert status.returncode == 0
    assert status.stdout.splitlines() == [
        f"Kafka: running at 127.0.0.1:{port} (pid {pid}, data {data_dir})",
        f"Redis: not running (data {workdir / 'r'})",
    ]

    down = dev("kafka-down", "--data-dir", data_dir, cwd=workdir)
    assert down.returncode == 0, down.stderr
    assert f"Kafka stopped (pid {pid})" in down.stderr
    assert wait_until(lambda: not pid_alive(pid), 15)
    assert not port_accepts(port) and not port_accepts(controller_port)
    assert not (data_dir / "kafka.pid").exists()

    twice = dev("kafka-down", "--data-dir", data_dir, cwd=workdir)
    assert twice.returncode == 0
    assert "Kafka is not running" in twice.stderr


def test_redis_up_down_with_default_data_dir(workdir: Path) -> None:
    (port,) = free_ports(1)
    up = dev("redis-up", "--port", port, cwd=workdir)
    assert up.returncode == 0, up.stderr
    assert up.stdout == f"redis://127.0.0.1:{port}/0\n"
    data_dir = workdir / "var" / "redis"
    pid = read_pid_file(data_dir / "redis.pid")
    assert pid is not None and pid_alive(pid)
    client = redis.Redis(port=port, socket_timeout=5)
    assert client.set("k", b"v") is True and client.get("k") == b"v"
    client.close()

    down = dev("redis-down", cwd=workdir)
    assert down.returncode == 0, down.stderr
    assert wait_until(lambda: not pid_alive(pid), 15)
    assert not port_accepts(port)
    assert not (data_dir / "redis.pid").exists()


def test_down_ignores_a_pid_file_naming_another_process(workdir: Path) -> None:
    data_dir = workdir / "kafka"
    data_dir.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (data_dir / "kafka.pid").write_text(f"{sleeper.pid}\n")
        down = dev("kafka-down", "--data-dir", data_dir, cwd=workdir)
        assert down.returncode == 0
        assert "Kafka is not running" in down.stderr
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait(10)


def test_kafka_up_fails_clearly_on_a_taken_port(workdir: Path) -> None:
    port, controller_port = free_ports(2)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        up = dev(
            "kafka-up",
            "--port",
            port,
            "--controller-port",
            controller_port,
            "--data-dir",
            workdir / "k",
            cwd=workdir,
        )
        assert up.returncode == 1
        assert up.stdout == ""
        assert f"port(s) {port} on 127.0.0.1 already in use" in up.stderr
        assert not (workdir / "k" / "kafka.pid").exists()
    finally:
        holder.kill()
        holder.wait(10)
