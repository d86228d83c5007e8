"""Spawning servers: a missing program is a clear error, the pid is the server's own, and
an attached server does not outlive the process that started it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dedup_broker.devservers import process
from dedup_broker.errors import DevServerError

REPO = Path(__file__).resolve().parents[3]
STARTER = """
import sys
from pathlib import Path
from dedup_broker.devservers import process

child = process.spawn(["sleep", "300"], cwd=Path(sys.argv[1]), log_path=Path(sys.argv[1]) / "log",
                      detached=sys.argv[2] == "detached")
print(child.pid, flush=True)
sys.stdin.read()
"""


def test_a_missing_program_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DevServerError, match="cannot run no-such-server"):
        process.spawn(["no-such-server"], cwd=tmp_path, log_path=tmp_path / "log", detached=False)
    with pytest.raises(DevServerError, match=r"cannot run \./server"):
        process.spawn(["./server"], cwd=tmp_path, log_path=tmp_path / "log", detached=False)


def test_the_pid_is_the_servers_own(tmp_path: Path) -> None:
    child = process.spawn(["sleep", "300"], cwd=tmp_path, log_path=tmp_path / "log", detached=False)
    try:
        assert process.wait_until(
            lambda: (process.pid_cmdline(child.pid) or [""])[0].endswith("sleep"), 10.0
        ), process.pid_cmdline(child.pid)
        assert os.getsid(child.pid) == child.pid
    finally:
        process.kill_pid(child.pid, child)


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path), mode],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    return starter, int(starter.stdout.readline())


@pytest.mark.parametrize("mode", ["attached", "detached"])
def test_only_an_attached_server_dies_with_its_starter(tmp_path: Path, mode: str) -> None:
    starter, pid = _start(tmp_path, mode)
    try:
        assert process.pid_alive(pid)
        starter.kill()
        starter.wait(timeout=30)
        attached = mode == "attached"
        gone = process.wait_until(lambda: not process.pid_alive(pid), 10.0 if attached else 2.0)
        assert gone == attached
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(timeout=30)
        if process.pid_alive(pid):
            os.kill(pid, 9)
