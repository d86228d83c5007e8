"""The test and bench harness's broker process: a session of its own (CPU is shared
between servers, not between threads), and no broker left behind by a killed starter."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from dedup_broker.devservers.process import pid_alive
from harness.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
STARTER = """
import sys
from pathlib import Path
from harness.broker_process import BrokerProcess

broker = BrokerProcess(sys.argv[1], cluster_name=sys.argv[2], log_dir=Path(sys.argv[3]))
broker.start()
print(broker.process.pid, flush=True)
sys.stdin.read()
"""


def test_a_broker_leads_a_session_of_its_own(broker: BrokerProcess) -> None:
    assert broker.process is not None
    pid = broker.process.pid
    assert os.getsid(pid) == pid
    assert os.getsid(pid) != os.getsid(0)


def test_a_killed_starter_leaves_no_broker_behind(kafka_bootstrap: str, tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, kafka_bootstrap, f"t-{uuid.uuid4().hex[:10]}", tmp_path],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = 0
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        assert pid_alive(pid)
        starter.kill()
        starter.wait(timeout=30)
        deadline = time.monotonic() + 60
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pid_alive(pid), "the broker outlived the process that started it"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(timeout=30)
        if pid and pid_alive(pid):
            os.kill(pid, 9)


def test_a_port_taken_before_the_first_start_is_chosen_again(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Between ``free_port`` choosing a port and the broker binding it, another test's
    server may take it: the broker then starts on other ports, not against that server."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        broker = BrokerProcess(kafka_bootstrap, f"t-{uuid.uuid4().hex[:10]}", log_dir=tmp_path)
        broker.http_port = squatter.getsockname()[1]
        try:
            broker.start()
            assert broker.starts == 2
            assert broker.http_port != squatter.getsockname()[1]
            assert "address already in use" in (tmp_path / "broker-1.log").read_text().lower()
        finally:
            broker.stop()
