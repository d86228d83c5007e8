"""What every native server launcher shares: its process, stop, kill, close."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

from dedup_broker.devservers import process


class NativeServer:
    """A server process started from this machine's binaries, kept in ``data_dir``.

    Subclasses set ``data_dir``, ``_owns_dir`` and ``stop_timeout`` and implement
    ``start()``, which stores the spawned process in ``_popen``.
    """

    data_dir: Path
    stop_timeout: float
    _owns_dir: bool
    _popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
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
