"""A Docker engine for the container tier: the one that answers, else a ``dockerd`` of our own.

Machines of this project have no systemd and no registry, so the engine is Debian's
``docker.io`` started by hand with ``--bridge=none --iptables=false``: every container runs
with host networking and binds 127.0.0.1, nothing needs a bridge or NAT rules. Our engine
listens on a socket of its own (``ENGINE_DIR/docker.sock``), not the default one: the
development servers (``provision``) pick containers whenever the default socket answers,
and other test runs on the machine must not switch to containers because this tier runs.
The data root stays Docker's default, so the built images outlive the engine.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dedup_broker.errors import DevServerError

ENGINE_DIR = Path("/run/dedup-broker-docker")
ENGINE_SOCKET = ENGINE_DIR / "docker.sock"
ENGINE_HOST = f"unix://{ENGINE_SOCKET}"
ENGINE_PIDFILE = ENGINE_DIR / "dockerd.pid"
DEFAULT_HOST = "unix:///var/run/docker.sock"
DEBIAN_PACKAGES = {
    "dockerd": "docker.io",
    "debootstrap": "debootstrap",
    "docker-compose": "docker-compose",
}
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 45.0

_log = logging.getLogger(__name__)


def docker_sdk() -> Any:
    """The Docker SDK module, imported by name: it is untyped, and the repository's
    ``docker/`` folder of Dockerfiles must not shadow it for the type checker."""
    return importlib.import_module("docker")


def answers(host: str, timeout: float = 3.0) -> bool:
    """True when the engine at ``host`` (``unix://...``) answers a ping."""
    if host.startswith("unix://") and not Path(host.removeprefix("unix://")).exists():
        return False
    try:
        client = docker_sdk().DockerClient(base_url=host, timeout=max(1, int(timeout)))
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


def ensure_tools(*tools: str) -> None:
    """Installs the Debian packages of ``tools`` (``dockerd``, ``debootstrap``,
    ``docker-compose``) that are missing; only as root, otherwise the error says what to
    install."""
    missing = [DEBIAN_PACKAGES[tool] for tool in tools if not _which(tool)]
    if not missing:
        return
    if os.geteuid() != 0 or not _which("apt-get"):
        raise DevServerError(
            f"missing {', '.join(missing)}: on Debian, as root, "
            f"apt-get install -y {' '.join(missing)}"
        )
    _log.info("installing %s", " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        result = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise DevServerError(
                f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-2000:]}"
                f"{result.stderr[-2000:]}"
            )


def _which(tool: str) -> str | None:
    """``tool`` on the PATH or in the sbin folders (not on a plain user's PATH)."""
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


class DockerEngine:
    """The engine to use: ``DOCKER_HOST``, the default socket, or our own ``dockerd``.

    ``start()`` reuses an engine that answers; only when none does, and we are root, it
    starts ``dockerd``, which ``stop()`` then stops again. An engine it did not start is
    never stopped.
    """

    def __init__(self, log_path: Path | None = None) -> None:
        self.host: str | None = None
        self.log_path = log_path or ENGINE_DIR / "dockerd.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def started_here(self) -> bool:
        return self._process is not None

    def start(self) -> str:
        """The ``DOCKER_HOST`` value of an engine that answers (started if need be)."""
        configured = os.environ.get("DOCKER_HOST", "").strip()
        if configured:
            if not answers(configured):
                raise DevServerError(f"DOCKER_HOST={configured} is set but no engine answers")
            self.host = configured
            return configured
        for host in (DEFAULT_HOST, ENGINE_HOST):
            if answers(host):
                self.host = host
                return host
        ensure_tools("dockerd")
        self._start_dockerd()
        self.host = ENGINE_HOST
        return ENGINE_HOST

    def stop(self) -> None:
        """Stops the ``dockerd`` this object started (its containers go with it)."""
        process, self._process = self._process, None
        if process is None:
            return
        _terminate(process.pid, lambda: process.poll() is not None)
        ENGINE_PIDFILE.unlink(missing_ok=True)

    def _start_dockerd(self) -> None:
        dockerd = _which("dockerd")
        if dockerd is None:
            raise DevServerError("dockerd is not installed (Debian: apt-get install docker.io)")
        ENGINE_DIR.mkdir(parents=True, exist_ok=True)
        ENGINE_SOCKET.unlink(missing_ok=True)
        argv = [
            dockerd,
            f"--host={ENGINE_HOST}",
            f"--pidfile={ENGINE_PIDFILE}",
            "--bridge=none",
            "--iptables=false",
            "--log-level=warn",
        ]
        _log.info("starting %s", " ".join(argv))
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not answers(ENGINE_HOST, timeout=2.0):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log_path.read_text(errors="replace").splitlines()[-20:]
                raise DevServerError("dockerd did not start:\n" + "\n".join(tail))
            time.sleep(0.3)

    def __enter__(self) -> DockerEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_recorded_engine() -> bool:
    """Stops a ``dockerd`` of ours left running (its pid file names it, and the process
    still is that ``dockerd`` on our socket); True when there was one."""
    try:
        pid = int(ENGINE_PIDFILE.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    if not cmdline or not cmdline[0].endswith(b"dockerd"):
        return False
    ours = f"--host={ENGINE_HOST}".encode() in cmdline or any(
        flag in (b"--host", b"-H") and value == ENGINE_HOST.encode()
        for flag, value in itertools.pairwise(cmdline)
    )
    if not ours:
        return False
    _terminate(pid, lambda: not Path(f"/proc/{pid}").exists() or _is_zombie(pid))
    ENGINE_PIDFILE.unlink(missing_ok=True)
    return True


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _terminate(pid: int, gone: Callable[[], bool]) -> None:
    """SIGTERM (dockerd stops its containers and containerd), SIGKILL if it hangs."""
    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_SECONDS), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if gone():
                return
            time.sleep(0.2)
