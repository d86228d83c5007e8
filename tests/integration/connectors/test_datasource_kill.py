"""The data source pipeline (partitioned topic A -> transformation -> topic B) killed with
kill -9 in the middle of a micro-batch, after part of it reached topic B, and restarted
from its checkpoint: topic B holds every derived row exactly once."""

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

from dedup_broker.testing.admin_http import http_request
from dedup_broker.testing.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stable_count, stored_values

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.timeout(600)

PARTITIONS = 3
PER_PARTITION = 300
ROWS = PARTITIONS * PER_PARTITION
FIRST_BATCH = 600
"""``maxOffsetsPerTrigger``: 200 rows of each partition, then the 300 left."""
START_TIMEOUT = 240.0


def test_pipeline_killed_mid_batch_and_restarted_derives_each_row_once(
    dedup_broker: BrokerProcess, tmp_path: Path
) -> None:
    source = f"persistent://public/default/src-{uuid.uuid4().hex[:8]}"
    target = f"persistent://public/default/dst-{uuid.uuid4().hex[:8]}"
    path = "/admin/v2/persistent/" + source.removeprefix("persistent://") + "/partitions"
    assert http_request("PUT", dedup_broker.http_url + path, str(PARTITIONS).encode())[0] == 204
    client = pulsar.Client(dedup_broker.service_url, operation_timeout_seconds=30)
    try:
        for p in range(PARTITIONS):
            producer = client.create_producer(f"{source}-partition-{p}", batching_enabled=False)
            for j in range(PER_PARTITION):
                producer.send_async(f"p{p}-r-{j:03d}".encode(), lambda _r, _m: None)
            producer.flush()
    finally:
        client.close()
    expected = [f"p{p}-r-{j:03d}-done" for p in range(PARTITIONS) for j in range(PER_PARTITION)]
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
        "--max-per-batch",
        str(FIRST_BATCH),
    ]
    with (tmp_path / "first-run.log").open("wb") as log:
        first = subprocess.Popen(
            [*command, "--slow-prefix", "p2-r-2", "--slow-ms", "100"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        # Killed in the second batch: partitions 0 and 1 written, partition 2 (slowed
        # down, 100 rows of 100 ms) still being transformed.
        deadline = time.monotonic() + START_TIMEOUT
        while len(stored_values(dedup_broker.service_url, target)) <= FIRST_BATCH:
            assert first.poll() is None, (tmp_path / "first-run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the second batch never started writing"
            time.sleep(0.5)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    at_kill = stable_count(dedup_broker, target)
    assert FIRST_BATCH < at_kill < ROWS

    second = subprocess.run(
        command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    stored = stored_values(dedup_broker.service_url, target)
    assert Counter(stored) == Counter(expected)
