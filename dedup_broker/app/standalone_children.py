"""The processes ``dedup-broker standalone`` owns: what each is, how it is stopped."""

from __future__ import annotations

import signal
from enum import Enum
from pathlib import Path
from typing import Protocol

from dedup_broker.devservers import process
from dedup_broker.devservers.native import NativeServer

BROKER_STOP_SECONDS = 30.0
"""Grace for the broker's clean shutdown (SIGTERM) before SIGKILL."""
WORKER_STOP_SECONDS = 15.0
SERVER_STOP_SECONDS = 30.0


class Role(Enum):
    """What a process started by standalone is; the value is how it is printed."""

    KAFKA = "kafka"
    REDIS = "redis"
    BROKER = "broker"
    DELETION_WORKER = "deletion-worker"


STOP_ORDER = (Role.BROKER, Role.DELETION_WORKER, Role.REDIS, Role.KAFKA)
"""Clients of a server stop before it: the broker drains while Kafka and Redis still run."""


class Child(Protocol):
    role: Role
    pid: int
    log_path: Path

    def alive(self) -> bool: ...

    def exit_status(self) -> str: ...

    def stop(self) -> None: ...


class CommandChild:
    """A ``dedup-broker`` sub-command run as a child process."""

    def __init__(self, role: Role, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.role = role
        self.log_path = log_path
        self.grace = BROKER_STOP_SECONDS if role is Role.BROKER else WORKER_STOP_SECONDS
        self._popen = process.spawn(
            argv, cwd=Path.cwd(), log_path=log_path, detached=False, env=env
        )
        self.pid = self._popen.pid

    def alive(self) -> bool:
        return self._popen.poll() is None

    def exit_status(self) -> str:
        code = self._popen.poll()
        if code is None:
            return "running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def stop(self) -> None:
        process.stop_pid(self.pid, self.grace, self._popen)


class ServerChild:
    """A native Kafka or Redis that standalone launched (and so must stop)."""

    def __init__(self, role: Role, server: NativeServer) -> None:
        self.role = role
        self.server = server
        self.log_path = server.log_path
        pid = server.pid
        assert pid is not None, "a server is wrapped once it runs"
        self.pid = pid

    def alive(self) -> bool:
        return self.server.running

    def exit_status(self) -> str:
        return "running" if self.alive() else "exited"

    def stop(self) -> None:
        self.server.stop(SERVER_STOP_SECONDS)
