"""Process and port plumbing shared by the native Kafka and Redis launchers.

Everything here works by pid, so a server started detached by one command can be stopped
by another, and nothing ever signals a process by name.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from dedup_broker.errors import DevServerError


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the kernel considers free right now, all distinct.

    The sockets are held open together so the kernel cannot hand out one port twice.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_accepts(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_bindable(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on ``host:port`` now (as servers do, SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    """True while ``pid`` names a process that has not exited (zombies count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        # The state letter follows the parenthesised command name, which may hold spaces.
        state = stat.read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def pid_cmdline(pid: int) -> list[str] | None:
    """The command line of ``pid`` where /proc exposes it, else None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; report which."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def stop_pid(pid: int, grace: float, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; return once the process is gone.

    With ``popen`` (our own child) the exit status is collected, so no zombie remains.
    """
    if not _signal(pid, signal.SIGTERM, popen):
        return
    if _wait_gone(pid, grace, popen):
        return
    _signal(pid, signal.SIGKILL, popen)
    if not _wait_gone(pid, 15.0, popen):
        raise DevServerError(f"process {pid} survived SIGKILL for 15 s")


def kill_pid(pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGKILL and wait until the process is gone."""
    if _signal(pid, signal.SIGKILL, popen) and not _wait_gone(pid, 15.0, popen):
        raise DevServerError(f"process {pid} survived SIGKILL for 15 s")


def _signal(pid: int, signum: int, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None and popen.poll() is not None:
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None:
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    return wait_until(lambda: not pid_alive(pid), timeout)


def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    log_path: Path,
    detached: bool,
    env: dict[str, str] | None = None,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start a server process with its output appended to ``log_path``.

    ``user`` runs it as that OS user (for servers that refuse to run as root).

    Attached servers get the parent-death signal, so even a test run that is killed
    outright leaves no Kafka or Redis behind; detached ones get their own session so
    they outlive the command that started them.
    """
    program = argv[0]
    if _resolve(program, cwd) is None:
        raise DevServerError(f"cannot run {program}: no such executable")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        try:
            return subprocess.Popen(
                list(argv) if detached else with_parent_death(argv),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                user=user,
            )
        except OSError as exc:
            raise DevServerError(f"cannot run {program}: {exc}") from exc


def with_parent_death(argv: Sequence[str]) -> list[str]:
    """``argv`` run so that Linux SIGTERMs it when the calling thread ends.

    util-linux's ``setpriv`` sets the signal and then execs ``argv`` (same pid). A
    pre-exec hook would do the same in Python inside the forked child, which can hang
    forever on a lock some other thread (librdkafka's, the Pulsar client's) held at the
    fork. The kernel ties the signal to the creating thread, so it is only armed from
    the main thread; elsewhere, or without setpriv, the launcher's own stop (and
    atexit) must do.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return list(argv)
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


def _resolve(program: str, cwd: Path) -> str | None:
    """Where ``program`` would be found by exec, relative paths taken from ``cwd``."""
    if os.sep in program and not os.path.isabs(program):
        program = str(cwd / program)
    return shutil.which(program)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def read_pid_file(path: Path) -> int | None:
    """The pid stored in ``path``, or None when the file is missing or unreadable."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def write_pid_file(path: Path, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(path)


def remove_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def ensure_ports_free(ports: Sequence[int], what: str, wait: float = 0.0) -> None:
    """Fail early and clearly instead of letting a server die on a taken port; ``wait``:
    seconds a port may take to come free (the children of a killed server letting go)."""

    def taken_now() -> list[int]:
        return [port for port in ports if port_accepts(port) or not port_bindable(port)]

    wait_until(lambda: not taken_now(), wait, interval=0.1)
    taken = taken_now()
    if taken:
        raise DevServerError(
            f"cannot start {what}: port(s) {', '.join(map(str, taken))} on 127.0.0.1 already in use"
        )


class _Stoppable(Protocol):
    def stop(self, timeout: float | None = None) -> None: ...


_attached: set[_Stoppable] = set()


def track(server: _Stoppable) -> None:
    """Remember an attached server so interpreter exit stops it if nobody else did."""
    _attached.add(server)


def untrack(server: _Stoppable) -> None:
    _attached.discard(server)


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_attached):
        with contextlib.suppress(Exception):
            server.stop(timeout=10)
