"""The data source pipeline (partitioned topic A -> transformation -> topic B) killed with
kill -9 in the middle of a micro-batch, after part of it reached topic B, and restarted
from its checkpoint; then, while the restarted query runs, the broker is killed with kill -9
in the middle of a micro-batch and restarted on the same ports. Topic B holds every derived
row exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pulsar
import pytest

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stable_count, stored_values

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.timeout(600)

PARTITIONS = 3
PER_PARTITION = 300
ROWS = PARTITIONS * PER_PARTITION
FIRST_BATCH = 600
"""``maxOffsetsPerTrigger``: 200 rows of each partition, then the 300 left."""
MORE_PER_PARTITION = 100
"""Rows added to each partition of A before the restart, read in batches of ``LATER_BATCH``."""
LATER_BATCH = 150
START_TIMEOUT = 240.0
RUN_TIMEOUT = 300.0


def test_pipeline_killed_mid_batch_then_broker_killed_derives_each_row_once(
    dedup_broker: BrokerProcess, tmp_path: Path
) -> None:
    source = f"persistent://public/default/src-{uuid.uuid4().hex[:8]}"
    target = f"persistent://public/default/dst-{uuid.uuid4().hex[:8]}"
    path = "/admin/v2/persistent/" + source.removeprefix("persistent://") + "/partitions"
    assert http_request("PUT", dedup_broker.http_url + path, str(PARTITIONS).encode())[0] == 204
    expected = _fill(dedup_broker.service_url, source, "r", PER_PARTITION)
    command = [
        sys.executable,
        "-m",
        "examples.demo.datasource_job",
        "--service-url",
        dedup_broker.service_url,
        "--admin-url",
        dedup_broker.http_url,
        "--source",
        source,
        "--target",
        target,
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--name",
        "kill-test",
    ]
    first = _start(
        [*command, "--max-per-batch", str(FIRST_BATCH), "--slow-prefix", "p2-r-2"],
        tmp_path / "first-run.log",
    )
    try:
        # Killed in the second batch: partitions 0 and 1 written, partition 2 (slowed
        # down, 100 rows of 100 ms) still being transformed.
        _wait_stored(dedup_broker, target, FIRST_BATCH, first, tmp_path / "first-run.log")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    at_kill = stable_count(dedup_broker, target)
    assert FIRST_BATCH < at_kill < ROWS

    # The restart replays the killed batch, then reads the new rows in two batches of 150,
    # partition 2's slowly; the broker is killed once the first of them reached topic B.
    expected += _fill(dedup_broker.service_url, source, "s", MORE_PER_PARTITION)
    # local[2,4]: a task that fails while the broker is away is tried again.
    restarted = [*command, "--max-per-batch", str(LATER_BATCH), "--master", "local[2,4]"]
    log = tmp_path / "second-run.log"
    second = _start([*restarted, "--slow-prefix", "p2-s-0"], log)
    try:
        _wait_stored(dedup_broker, target, ROWS, second, log)
        dedup_broker.restart(kill=True)
        code = second.wait(timeout=RUN_TIMEOUT)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    if code != 0:
        # The driver plans a batch with the broker's admin API; if it was away at that
        # moment, the query fails, and an operator starts it again from its checkpoint.
        third = subprocess.run(
            restarted, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL
        )
        assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-3000:]
    stored = stored_values(dedup_broker.service_url, target)
    assert Counter(stored) == Counter(expected)


def _fill(service_url: str, topic: str, tag: str, per_partition: int) -> list[str]:
    """``p{partition}-{tag}-{n}`` into each partition of ``topic``; the derived values."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        for p in range(PARTITIONS):
            producer = client.create_producer(f"{topic}-partition-{p}", batching_enabled=False)
            for j in range(per_partition):
                producer.send_async(f"p{p}-{tag}-{j:03d}".encode(), lambda _r, _m: None)
            producer.flush()
            producer.close()
    finally:
        client.close()
    return [f"p{p}-{tag}-{j:03d}-done" for p in range(PARTITIONS) for j in range(per_partition)]


def _start(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """The job in its own process group (so that kill -9 takes its JVM along)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [*command, "--slow-ms", "100"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_stored(
    broker: BrokerProcess, topic: str, above: int, job: subprocess.Popen[bytes], log: Path
) -> None:
    """Until topic B holds more than ``above`` messages (the job must keep running)."""
    deadline = time.monotonic() + START_TIMEOUT
    while len(stored_values(broker.service_url, topic)) <= above:
        assert job.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"topic B never exceeded {above} messages"
        time.sleep(0.5)
