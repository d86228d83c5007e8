"""What every native server launcher shares: its process, stop, kill, close."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from dedup_broker.devservers import process
from dedup_broker.errors import DevServerError


class NativeServer:
    """A server process started from this machine's binaries, kept in ``data_dir``.

    Subclasses call ``_init_native`` from their constructor and implement ``start()``,
    which stores the spawned process in ``_popen`` and waits with ``_wait_until``.
    """

    data_dir: Path
    startup_timeout: float
    stop_timeout: float
    detached: bool
    _owns_dir: bool
    _popen: subprocess.Popen[bytes] | None = None

    def _init_native(
        self,
        kind: str,
        data_dir: Path | str | None,
        startup_timeout: float,
        stop_timeout: float,
        detached: bool,
    ) -> None:
        """A given data directory is kept on ``close()``; a temporary one is removed."""
        self._owns_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix=f"dedup-broker-{kind}-"))
            if data_dir is None
            else Path(data_dir).resolve()
        )
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.detached = detached
        self._popen = None

    def _wait_until(
        self, ready: Callable[[], bool], what: str, where: str, poll_seconds: float = 0.2
    ) -> None:
        """Until ``ready()``; fails with the log's tail if the process exits or time runs out."""
        assert self._popen is not None
        popen = self._popen
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                raise DevServerError(
                    f"{what} exited with code {popen.returncode} while starting "
                    f"(log {self.log_path}):\n{process.tail(self.log_path)}"
                )
            if ready():
                return
            time.sleep(poll_seconds)
        raise DevServerError(
            f"{what} at {where} not ready within {self.startup_timeout:.0f} s "
            f"(log {self.log_path}):\n{process.tail(self.log_path)}"
        )

    def start(self) -> None:
        raise NotImplementedError

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The pid of the running process, or None when it is not running."""
        if self._popen is None or self._popen.poll() is not None:
            return None
        return self._popen.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after the grace period; waits for exit."""
        if self._popen is not None:
            grace = self.stop_timeout if timeout is None else timeout
            process.stop_pid(self._popen.pid, grace, self._popen)
        process.untrack(self)

    def kill(self) -> None:
        """SIGKILL, as a crash would; waits for exit. Data is kept for ``start()``."""
        if self._popen is not None:
            process.kill_pid(self._popen.pid, self._popen)
        process.untrack(self)

    def close(self) -> None:
        """Stop, and remove the data directory if this object created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
