"""A Redis server run from the system's ``redis-server`` binary, for machines without Docker.

Without persistence by default: a restart then loses every key, which is exactly the
outage the key-window deduplication must survive. With ``persistent=True`` every write is
appended and fsynced, so even SIGKILL loses nothing. With ``tls`` it serves TLS only
(``rediss://``).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dedup_broker.devservers import process
from dedup_broker.devservers.native import NativeServer
from dedup_broker.errors import DevServerError

_log = logging.getLogger(__name__)


def find_redis_server(install: bool = True) -> str:
    """``redis-server`` on the PATH, installed with apt-get when missing and allowed."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    apt = shutil.which("apt-get")
    if install and apt is not None and os.geteuid() == 0:
        _log.warning("redis-server not found; installing it with apt-get")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        result = subprocess.run(
            [apt, "install", "-y", "-q", "redis-server"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=600,
            check=False,
        )
        found = shutil.which("redis-server")
        if found is not None:
            return found
        detail = (result.stdout + result.stderr).decode(errors="replace")[-2000:]
        raise DevServerError(f"apt-get install redis-server failed:\n{detail}")
    raise DevServerError(
        "redis-server not found: install it (Debian: apt-get install -y redis-server, "
        "as root) or point REDIS_URL at a running Redis"
    )


@dataclass(frozen=True)
class RedisTls:
    """PEM files of a TLS Redis: its certificate and key, and the CA clients verify it
    with. Clients need no certificate of their own (``tls-auth-clients no``)."""

    certificate: Path
    key: Path
    ca: Path

    def client_options(self) -> dict[str, str]:
        """redis-py's arguments for trusting the server (as ``redisSslCaLocation``)."""
        return {"ssl_ca_certs": str(self.ca)}


class NativeRedis(NativeServer):
    """One ``redis-server`` on 127.0.0.1 with a fixed port and its own directory."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        port: int | None = None,
        persistent: bool = False,
        startup_timeout: float = 20.0,
        stop_timeout: float = 10.0,
        detached: bool = False,
        password: str | None = None,
        tls: RedisTls | None = None,
    ) -> None:
        self._init_native("redis", data_dir, startup_timeout, stop_timeout, detached)
        self.password = password
        """``requirepass``: clients must AUTH (the URL carries it)."""
        self.tls = tls
        """TLS on ``port`` instead of plain TCP (the URL is ``rediss://``)."""
        self.port = process.free_ports(1)[0] if port is None else port
        self.persistent = persistent

    @property
    def url(self) -> str:
        credentials = f":{self.password}@" if self.password else ""
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://{credentials}127.0.0.1:{self.port}/0"

    @property
    def client_options(self) -> dict[str, str]:
        """What redis-py needs next to ``url`` (with TLS: the CA)."""
        return {} if self.tls is None else self.tls.client_options()

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def argv(self, executable: str) -> list[str]:
        """The server's command line (all settings as arguments, no config file)."""
        if self.tls is None:
            ports = ["--port", str(self.port)]
        else:
            ports = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(self.tls.certificate),
                "--tls-key-file",
                str(self.tls.key),
                "--tls-ca-cert-file",
                str(self.tls.ca),
                "--tls-auth-clients",
                "no",
            ]
        argv = [
            executable,
            *ports,
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--daemonize",
            "no",
            "--logfile",
            "",
        ]
        if self.password:
            argv += ["--requirepass", self.password]
        if self.persistent:
            argv += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        else:
            argv += ["--appendonly", "no", "--save", ""]
        return argv

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        if self.running:
            return
        process.ensure_ports_free([self.port], "Redis")
        executable = find_redis_server()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._popen = process.spawn(
            self.argv(executable),
            cwd=self.data_dir,
            log_path=self.log_path,
            detached=self.detached,
        )
        if not self.detached:
            process.track(self)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        _log.info("Redis up at %s (pid %d)", self.url, self._popen.pid)

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"NativeRedis({self.url}, {self.data_dir}, {state})"

    def _wait_ready(self) -> None:
        self._wait_until(
            lambda: process.port_accepts(self.port) and ping(self.url, options=self.client_options),
            "redis-server",
            self.url,
            poll_seconds=0.1,
        )


def ping(url: str, timeout: float = 1.0, options: Mapping[str, str] | None = None) -> bool:
    """True when the Redis at ``url`` answers PING (and is not still loading its data);
    ``options`` are redis-py's (``ssl_ca_certs`` for a ``rediss://`` URL)."""
    import redis

    client = redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, **(options or {})
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()
