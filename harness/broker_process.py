"""A broker in its own OS process, so that it can be ``kill -9``ed like in production."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from dedup_broker.config import ENV_PREFIX
from dedup_broker.devservers.process import with_parent_death

PORT_ATTEMPTS = 3


class PortTakenError(RuntimeError):
    """The broker could not bind a port chosen for it: another process took it."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BrokerProcess:
    """Start, stop, kill and restart one broker on fixed loopback ports.

    The broker runs in a session of its own, as Kafka, Redis and Pulsar do when the
    project starts them (and as a deployed broker runs, under its own service or
    container): with Linux's autogroup, CPU is then shared between the servers and the
    command that started them, not between threads. In the starter's session a
    broker's event loop is one thread among a load generator's dozen: it gets a twelfth
    of the contended CPU while the Kafka behind it, in a session of its own, gets half.
    It still gets SIGTERM when the thread that started it ends, so a killed test run
    leaves none behind.
    """

    command: tuple[str, ...] = ("serve",)
    health_path = "/admin/v2/brokers/health"

    def __init__(
        self,
        kafka_bootstrap: str,
        cluster_name: str,
        settings: dict[str, Any] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.kafka_bootstrap = kafka_bootstrap
        self.cluster_name = cluster_name
        self.port = free_port()
        self.http_port = free_port()
        self.settings = dict(settings or {})
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="dedup-broker-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        """Plain HTTP, or HTTPS when the settings switch the plain web port off."""
        if str(self.settings.get("web_service_port")) == "none":
            return f"https://127.0.0.1:{self.settings['web_service_port_tls']}"
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def https_context(self) -> ssl.SSLContext | None:
        """For an HTTPS ``http_url``: trusts the broker's ``tlsTrustCertsFilePath``."""
        if not self.http_url.startswith("https:"):
            return None
        return ssl.create_default_context(cafile=self.settings.get("tls_trust_certs_file_path"))

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"broker-{self.starts}.log"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        values: dict[str, Any] = {
            "cluster_name": self.cluster_name,
            "kafka_bootstrap_servers": self.kafka_bootstrap,
            "bind_address": "127.0.0.1",
            "advertised_address": "127.0.0.1",
            "broker_service_port": self.port,
            "web_service_port": self.http_port,
            # Test brokers share one Kafka: each cluster gets deletion topics of its own.
            "two_phase_deletion_topic": f"{self.cluster_name}.__ledger_deletion",
            "two_phase_deletion_retry_topic": f"{self.cluster_name}.__ledger_deletion-RETRY",
            "two_phase_deletion_dead_letter_topic": f"{self.cluster_name}.__ledger_deletion-DLQ",
            # A frozen broker's slots move after this (a killed one's at once).
            "cluster_peer_timeout_millis": 3000,
        } | self.settings
        for name, value in values.items():
            env[ENV_PREFIX + name.upper()] = (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
        return env

    def start(self, timeout: float = 60.0) -> None:
        """Starts the broker and waits until it serves. On its first start a port another
        test's server took since ``free_port`` chose it is chosen again (a restart keeps
        its ports: clients know them)."""
        first = self.starts == 0
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(timeout)
                return
            except PortTakenError:
                if not first or attempt == PORT_ATTEMPTS:
                    raise
                self.port, self.http_port = free_port(), free_port()

    def _start(self, timeout: float) -> None:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("broker already running")
        self.starts += 1
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            with_parent_death([sys.executable, "-m", "dedup_broker.app.cli", *self.command]),
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()  # a broker that never became ready is not left running
            raise

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                tail = self.tail()
                exited = f"broker exited with {self.process.returncode}:\n{tail}"
                if "address already in use" in tail.lower():
                    raise PortTakenError(exited)
                raise RuntimeError(exited)
            try:
                with urllib.request.urlopen(
                    self.http_url + self.health_path, timeout=2, context=self.https_context
                ) as response:
                    if response.status == 200:
                        return
            except (OSError, http.client.HTTPException):
                pass  # not listening yet, or another server on the port (then it exits)
            time.sleep(0.2)
        raise TimeoutError(f"broker not ready after {timeout:.0f}s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def terminate(self, timeout: float) -> tuple[int, float]:
        """SIGTERM and wait: ``(exit code, seconds it took)``; fails past ``timeout``."""
        assert self.process is not None and self.process.poll() is None, "not running"
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
            raise TimeoutError(f"broker still running {timeout:.0f}s after SIGTERM") from None
        return code, time.monotonic() - started

    def log_text(self) -> str:
        """The log of the current (or last) run."""
        return self.log_path.read_text(errors="replace")

    def restart(self, kill: bool = True) -> None:
        if kill:
            self.kill()
        else:
            self.stop()
        self.start()

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> BrokerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
