"""A streaming query killed (kill -9) mid-batch and restarted from its checkpoint.

The query runs in its own process (``examples.demo.stream_job``), reads JSON-lines
files one per micro-batch and publishes them through the sink. The first run stops
inside the third batch, after part of it was stored, and is killed with its whole
process group (driver JVM and Python workers). The second run replays that batch from
the checkpoint and finishes: every input line is stored exactly once.

``make soak`` runs it: in the suite, the demo (``tests/integration/test_demo.py``) kills
the same job in local mode inside a batch partly stored and checks the replay, and
``test_spark_cluster.py`` does so on a cluster with this test's checks of the report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from examples.demo.stream_job import write_input_files
from harness.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stable_count, stored_values

FILES = 4
ROWS_PER_FILE = 600
PAUSE_AT = 2 * ROWS_PER_FILE + ROWS_PER_FILE - 5
"""A row near the end of the third file: most of its Spark partition comes before it."""
START_TIMEOUT = 240.0
RUN_TIMEOUT = 300.0


def _write_input(directory: Path) -> list[str]:
    chunks = [
        [
            json.dumps({"id": i, "user": f"u{i % 17}", "note": "n" * 180})
            for i in range(first, first + ROWS_PER_FILE)
        ]
        for first in range(0, FILES * ROWS_PER_FILE, ROWS_PER_FILE)
    ]
    write_input_files(directory, "part-{:03d}.json", chunks)
    return [line for chunk in chunks for line in chunk]


@pytest.mark.soak
def test_streaming_query_killed_mid_batch_and_restarted_stores_each_row_once(
    dedup_broker: BrokerProcess, tmp_path: Path, topic: str
) -> None:
    lines = _write_input(tmp_path / "input")
    flag = tmp_path / "pause"
    flag.touch()
    command = [
        sys.executable,
        "-m",
        "examples.demo.stream_job",
        "--input",
        str(tmp_path / "input"),
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--service-url",
        dedup_broker.service_url,
        "--topic",
        topic,
        "--name",
        "restart-test",
    ]
    with (tmp_path / "first-run.log").open("wb") as log:
        first = subprocess.Popen(
            [*command, "--pause-at", str(PAUSE_AT), "--pause-flag", str(flag)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not Path(f"{flag}.paused").exists():
            assert first.poll() is None, (tmp_path / "first-run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the query never reached the pause row"
            time.sleep(0.2)
        at_kill = stable_count(dedup_broker, topic)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    # Two batches complete, the third one partly stored.
    assert 2 * ROWS_PER_FILE < at_kill < 3 * ROWS_PER_FILE

    flag.unlink()
    second = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    report = [line for line in second.stdout.splitlines() if line.startswith("batch ")]
    assert report[0].startswith("batch 2: rows 600, ")  # replayed from the checkpoint
    assert "already stored 0 " not in report[0]
    assert len(report) == 2

    stored = stored_values(dedup_broker.service_url, topic)
    assert Counter(stored) == Counter(lines)
