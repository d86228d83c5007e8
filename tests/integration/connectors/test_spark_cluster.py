"""The Spark connectors on a standalone cluster, with an executor and the driver killed.

A master and two workers (1 core, 1 GiB each) from the pyspark package's own jars, one
cluster for the module. Each pipeline runs its driver as its own process against it:

- ``foreachBatch(PulsarSink)``: files -> a topic (``examples.demo.stream_job``);
- the ``dedup-broker`` source and sink: partitioned topic A -> topic B
  (``examples.demo.datasource_job``).

In the middle of a micro-batch, after part of it was stored, the worker running the task
is killed with kill -9 together with its executor JVM and Python workers (as when its
machine dies), so the task runs again on the other worker; then the driver is killed with
kill -9 and started again from its checkpoint on a cluster with a fresh second worker.
The target holds every row exactly once and, per producer (one per Spark partition, one
per source partition for the data source), in the order of the input.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from connectors.spark_cluster import SparkStandaloneCluster
from dedup_broker.devservers.process import pid_alive, wait_until
from examples.demo.stream_job import write_input_files
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stored_messages, stored_values

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.timeout(900)

logger = logging.getLogger(__name__)
PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""The jobs run as ``python -m examples.demo...`` from here."""
WAIT_TIMEOUT = 360.0
"""Patient: drivers and executors start slowly on a busy 2-core machine."""
RUN_TIMEOUT = 420.0
EXECUTOR_EXIT_TIMEOUT = 90.0

FILES = 3
ROWS_PER_FILE = 400
PAUSE_AT = 2 * ROWS_PER_FILE - 5
"""A row near the end of the second file: most of its Spark partition comes before it."""

PARTITIONS = 3
PER_PARTITION = 400
BATCH = 600
"""``maxOffsetsPerTrigger``: 200 rows of each partition per micro-batch, two batches."""
SLOW_PREFIX = "p2-r-3"
"""Partition 2's last 100 rows, in the second batch, take ``SLOW_MS`` each."""
SLOW_MS = 100


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    spark_cluster = SparkStandaloneCluster(
        tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g"
    )
    spark_cluster.start(wait=False)  # the workers start while the test's broker does
    try:
        yield spark_cluster
    finally:
        spark_cluster.stop()


@pytest.fixture
def two_workers(cluster: SparkStandaloneCluster) -> SparkStandaloneCluster:
    """The cluster with two registered workers (a test before may have killed one)."""
    while len(cluster.running_workers()) < 2:
        cluster.add_worker(wait=False)
    cluster.wait_for_workers()
    return cluster


def test_foreach_batch_sink_on_a_cluster_with_executor_and_driver_killed_stores_each_row_once(
    dedup_broker: BrokerProcess, two_workers: SparkStandaloneCluster, tmp_path: Path, topic: str
) -> None:
    cluster = two_workers
    lines = _write_input(tmp_path / "input")
    flag = tmp_path / "pause"
    flag.touch()
    paused = Path(f"{flag}.paused")
    command = [
        *("-m", "examples.demo.stream_job", "--master", cluster.master_url),
        *("--input", str(tmp_path / "input"), "--checkpoint", str(tmp_path / "checkpoint")),
        *("--service-url", dedup_broker.service_url, "--topic", topic, "--name", "cluster-sink"),
    ]
    first_log = tmp_path / "first-run.log"
    first = _start([*command, "--pause-at", str(PAUSE_AT), "--pause-flag", str(flag)], first_log)
    try:
        paused_task = _wait_pid(paused, None, first, first_log)
        # The rows the task passed before pausing are still on their way through the
        # executor's workers on a busy machine: the kill is meant to cut a batch partly
        # stored, so it waits until some are.
        part_stored = wait_until(lambda: _count(dedup_broker, topic) > ROWS_PER_FILE, 120, 1.0)
        assert part_stored, "no row of batch 1 was stored while its task paused"
        logger.info("task %d paused inside batch 1; kill -9 its worker", paused_task)
        cluster.kill_worker(cluster.worker_holding(paused_task))
        at_executor_kill = _count(dedup_broker, topic)
        # Spark runs the task again on the other worker; it stops at the same row.
        retried_task = _wait_pid(paused, paused_task, first, first_log)
        logger.info("the task again in process %d; kill -9 the driver", retried_task)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    _wait_gone(retried_task)
    flag.unlink()
    at_driver_kill = _count(dedup_broker, topic)
    logger.info(
        "stored: %d at the executor's kill, %d at the driver's", at_executor_kill, at_driver_kill
    )
    # Batch 0 complete, batch 1 partly stored, both times.
    assert ROWS_PER_FILE < at_executor_kill <= at_driver_kill < 2 * ROWS_PER_FILE

    logger.info("restarting the driver from its checkpoint")
    cluster.add_worker(wait=False)  # joins the restarted driver's application
    second = _run(command)
    report = [line for line in second.stdout.splitlines() if line.startswith("batch ")]
    assert report[0].startswith(f"batch 1: rows {ROWS_PER_FILE}, ")  # from the checkpoint
    assert "already stored 0 " not in report[0]
    assert len(report) == 2

    _assert_each_once_in_order(
        stored_messages(dedup_broker.service_url, topic), lines, lambda v: json.loads(v)["id"]
    )


@pytest.mark.soak  # the foreachBatch test's kills, through the Data Source
def test_data_source_pipeline_on_a_cluster_with_executor_and_driver_killed_derives_each_row_once(
    dedup_broker: BrokerProcess, two_workers: SparkStandaloneCluster, tmp_path: Path
) -> None:
    cluster = two_workers
    source = f"persistent://public/default/src-{uuid.uuid4().hex[:8]}"
    target = f"persistent://public/default/dst-{uuid.uuid4().hex[:8]}"
    path = "/admin/v2/persistent/" + source.removeprefix("persistent://") + "/partitions"
    assert http_request("PUT", dedup_broker.http_url + path, str(PARTITIONS).encode())[0] == 204
    expected = _fill(dedup_broker.service_url, source)
    command = [
        *("-m", "examples.demo.datasource_job", "--master", cluster.master_url),
        *("--service-url", dedup_broker.service_url, "--admin-url", dedup_broker.http_url),
        *("--source", source, "--target", target, "--name", "cluster-pipeline"),
        *("--checkpoint", str(tmp_path / "checkpoint"), "--max-per-batch", str(BATCH)),
    ]
    flag = tmp_path / "slow-task"
    first_log = tmp_path / "first-run.log"
    first = _start(
        [
            *(*command, "--slow-prefix", SLOW_PREFIX, "--slow-ms", str(SLOW_MS)),
            *("--slow-flag", str(flag)),
        ],
        first_log,
    )
    try:
        slow_task = _wait_pid(flag, None, first, first_log)
        logger.info("task %d in the slow rows of batch 1; kill -9 its worker", slow_task)
        cluster.kill_worker(cluster.worker_holding(slow_task))
        at_executor_kill = _count(dedup_broker, target)
        # The task reads its range again on the other worker and reaches the slow rows.
        retried_task = _wait_pid(flag, slow_task, first, first_log)
        logger.info("the task again in process %d; kill -9 the driver", retried_task)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    _wait_gone(retried_task)
    at_driver_kill = _count(dedup_broker, target)
    logger.info(
        "stored: %d at the executor's kill, %d at the driver's", at_executor_kill, at_driver_kill
    )
    # Batch 0 complete, batch 1 partly written, both times.
    assert BATCH < at_executor_kill <= at_driver_kill < len(expected)

    logger.info("restarting the driver from its checkpoint")
    cluster.add_worker(wait=False)
    _run(command)

    _assert_each_once_in_order(
        stored_messages(dedup_broker.service_url, target), expected, _source_position
    )


def _count(broker: BrokerProcess, topic: str) -> int:
    return len(stored_values(broker.service_url, topic))


def _write_input(directory: Path) -> list[str]:
    """``FILES`` JSON-lines files (the query reads one per micro-batch); every line."""
    chunks = [
        [json.dumps({"id": i, "user": f"u{i % 17}"}) for i in range(first, first + ROWS_PER_FILE)]
        for first in range(0, FILES * ROWS_PER_FILE, ROWS_PER_FILE)
    ]
    write_input_files(directory, "part-{:03d}.json", chunks)
    return [line for chunk in chunks for line in chunk]


def _fill(service_url: str, topic: str) -> list[str]:
    """``p{partition}-r-{n}`` into each partition of ``topic``; the derived values."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        for p in range(PARTITIONS):
            producer = client.create_producer(f"{topic}-partition-{p}", batching_enabled=False)
            for j in range(PER_PARTITION):
                producer.send_async(f"p{p}-r-{j:03d}".encode(), lambda _r, _m: None)
            producer.flush()
            producer.close()
    finally:
        client.close()
    return [f"p{p}-r-{j:03d}-done" for p in range(PARTITIONS) for j in range(PER_PARTITION)]


def _source_position(derived: str) -> int:
    """``p{partition}-r-{n}-done`` -> its place in the source, partition by partition."""
    partition, _tag, index, _done = derived.split("-")
    return int(partition.removeprefix("p")) * PER_PARTITION + int(index)


def _assert_each_once_in_order(
    messages: list[pulsar.Message], expected: list[str], position: Callable[[str], int]
) -> None:
    """Every expected value stored once, and each producer's values in input order
    (``position``: where a value comes in the input)."""
    values = [m.data().decode() for m in messages]
    assert Counter(values) == Counter(expected)
    by_producer: dict[str, list[str]] = defaultdict(list)
    for message, value in zip(messages, values, strict=True):
        by_producer[message.producer_name()].append(value)
    for producer, sent in by_producer.items():
        assert sent == sorted(sent, key=position), f"{producer} stored its rows out of order"


def _start(arguments: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """A driver in its own process group (so that kill -9 takes its JVM along)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, *arguments],
            cwd=PROJECT_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _run(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """A driver run to its end; it must succeed."""
    result = subprocess.run(
        [sys.executable, *arguments],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def _wait_pid(flag: Path, other_than: int | None, job: subprocess.Popen[bytes], log: Path) -> int:
    """The process id a task writes to ``flag`` once it reaches its marked rows (one other
    than ``other_than``: the task run again elsewhere); the driver must keep running."""
    deadline = time.monotonic() + WAIT_TIMEOUT
    while True:
        assert job.poll() is None, log.read_text()[-3000:]
        try:
            pid = int(flag.read_text())
        except (OSError, ValueError):
            pid = None
        if pid is not None and pid != other_than:
            return pid
        assert time.monotonic() < deadline, f"no task reached the marked rows ({flag})"
        time.sleep(0.2)


def _wait_gone(task: int) -> None:
    """A task of a killed driver ends with its executor, which the worker stops once the
    master has ended the application."""
    assert wait_until(lambda: not pid_alive(task), EXECUTOR_EXIT_TIMEOUT, interval=0.5), (
        f"task process {task} outlived its driver"
    )
