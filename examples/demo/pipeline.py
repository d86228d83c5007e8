"""The main job: an effectively-once pipeline through the broker, with crashes, and a summary.

Starts (or reuses) a real Kafka and Redis and runs the broker as its own process with
deduplication on. Then: replayable input files -> Spark Structured Streaming -> the
``PulsarSink`` -> a topic -> an effectively-once consumer -> a SQLite results table.
During the run the Spark query is ``kill -9``ed in the middle of a micro-batch and
restarted from its checkpoint, and the broker is ``kill -9``ed and restarted. The
summary compares what went in with what the topic stores and what the results hold.

Spark runs in local mode, or with ``spark_master`` on a standalone cluster sharing this
machine's file system (input files, checkpoint, the pause flag).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pulsar

from dedup_broker.devservers import provide_kafka, provide_redis
from dedup_broker.errors import DevServerError
from examples.demo.results import (
    ConsumeStats,
    consume_into_results,
    quiet_client_logger,
    results_summary,
)
from examples.demo.stream_job import write_input_files
from harness.broker_process import BrokerProcess

FILES = 6
PAUSE_FILE = 2
"""The Spark query is killed inside the micro-batch of this input file."""
SPARK_START_TIMEOUT = 240.0
PART_STORED_TIMEOUT = 60.0
SPARK_RUN_TIMEOUT = 600.0
CONSUME_TIMEOUT = 300.0
READ_MS = 30_000
PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""Where ``examples`` is importable from: the streaming job's working directory."""


def run_demo(total: int, spark_master: str | None = None) -> int:
    """Run the whole pipeline for ``total`` rows (on ``spark_master``, else Spark's local
    mode); 0 when nothing was lost or duplicated."""
    print("dedup-broker demo: starting Kafka and Redis (first run downloads Kafka) ...")
    kafka = provide_kafka()
    try:
        redis = provide_redis()
    except BaseException:
        kafka.stop()
        raise
    work_dir = Path(tempfile.mkdtemp(prefix="dedup-broker-demo-"))
    try:
        print(f"  Kafka: {kafka.bootstrap_servers} ({kafka.kind})")
        print(f"  Redis: {redis.url} ({redis.kind})")
        broker = BrokerProcess(
            kafka.bootstrap_servers,
            cluster_name=f"demo-{uuid.uuid4().hex[:8]}",
            settings={"broker_deduplication_enabled": True, "redis_url": redis.url},
            log_dir=work_dir,
        )
        try:
            broker.start()
        except (RuntimeError, TimeoutError) as exc:
            broker.stop()
            raise DevServerError(f"the broker did not start: {exc}") from None
        print(f"  broker: {broker.service_url}, admin {broker.http_url}")
        print(f"  Spark: {spark_master or 'local mode'}")
        print(f"  work directory (input, checkpoint, results.db, logs): {work_dir}")
        try:
            return Pipeline(broker, total, work_dir, spark_master).run()
        finally:
            broker.stop()
    finally:
        redis.stop()
        kafka.stop()


class Pipeline:
    def __init__(
        self, broker: BrokerProcess, total: int, work_dir: Path, spark_master: str | None = None
    ) -> None:
        self.broker = broker
        self.spark_master = spark_master
        self.total = total
        self.work_dir = work_dir
        self.topic = f"persistent://public/default/demo-{uuid.uuid4().hex[:6]}"
        self.input_dir = work_dir / "input"
        self.database = work_dir / "results.db"
        self.per_file = -(-total // FILES)
        self.replayed = 0

    def run(self) -> int:
        started = time.monotonic()
        lines = self._write_input()
        print(f"\n1. {len(lines)} rows in {FILES} input files (Spark reads one per micro-batch)")
        stop = threading.Event()
        consumed: list[ConsumeStats] = []
        consumer = threading.Thread(
            target=lambda: consumed.append(self._consume(stop)), name="consumer", daemon=True
        )
        consumer.start()

        print("2. Spark query -> sink -> topic; it will be killed in the middle of a batch")
        if not self._first_spark_run():
            stop.set()
            return 1
        print("3. Spark query restarted from its checkpoint; the broker is killed meanwhile")
        if not self._second_spark_run():
            stop.set()
            return 1
        consumer.join(CONSUME_TIMEOUT)
        stop.set()
        consumer.join(30)
        stats = consumed[0] if consumed else ConsumeStats()

        stored = self._stored()
        expected = {json.loads(line)["id"] for line in lines}
        stored_ids = [json.loads(value)["id"] for value in stored]
        duplicates = len(stored_ids) - len(set(stored_ids))
        missing = len(expected - set(stored_ids))
        results, distinct = results_summary(self.database)
        print()
        print("summary")
        print(f"  rows in:          {len(lines)}")
        print(f"  messages stored:  {len(stored)}")
        print(f"  duplicates:       {duplicates}")
        print(f"  missing:          {missing}")
        print(f"  results rows:     {results} ({distinct} distinct ids, {self.database.name})")
        print(f"  rows the restarted query replayed, already stored: {self.replayed}")
        print(f"  redeliveries skipped by the consumer: {stats.skipped}")
        print("  crashes:          Spark driver kill -9 mid-batch, broker kill -9")
        print(f"  elapsed:          {time.monotonic() - started:.1f}s")
        ok = duplicates == 0 and missing == 0 and len(stored) == len(lines)
        return 0 if ok and results == distinct == len(lines) else 1

    # --- input ----------------------------------------------------------------------
    def _write_input(self) -> list[str]:
        chunks = [
            [
                json.dumps({"id": i, "user": f"user-{i % 50}", "amount": (i * 37) % 1000 / 10})
                for i in range(index * self.per_file, min(self.total, (index + 1) * self.per_file))
            ]
            for index in range(FILES)
        ]
        write_input_files(self.input_dir, "events-{:03d}.json", chunks)
        return [line for chunk in chunks for line in chunk]

    # --- Spark ----------------------------------------------------------------------
    def _spark_command(self) -> list[str]:
        master = ["--master", self.spark_master] if self.spark_master else []
        return [
            sys.executable,
            "-m",
            "examples.demo.stream_job",
            "--input",
            str(self.input_dir),
            "--checkpoint",
            str(self.work_dir / "checkpoint"),
            "--service-url",
            self.broker.service_url,
            "--topic",
            self.topic,
            "--name",
            "demo-query",
            *master,
        ]

    def _first_spark_run(self) -> bool:
        flag = self.work_dir / "pause"
        flag.touch()
        pause_at = (PAUSE_FILE + 1) * self.per_file - max(1, self.per_file // 10)
        command = [*self._spark_command(), "--pause-at", str(pause_at), "--pause-flag", str(flag)]
        process, lines = self._start_spark(command, "spark-1.log")
        deadline = time.monotonic() + SPARK_START_TIMEOUT
        paused = Path(f"{flag}.paused")
        while not paused.exists() and process.poll() is None and time.monotonic() < deadline:
            self._relay(lines, 0.2)
        if not paused.exists():
            os.killpg(process.pid, signal.SIGKILL)
            print(f"   the Spark query did not start (see {self.work_dir / 'spark-1.log'})")
            return False
        # The rows the paused task passed are still on their way: the kill is meant to
        # cut a batch partly stored, so it waits (bounded) until some of them landed.
        before = PAUSE_FILE * self.per_file
        deadline = time.monotonic() + PART_STORED_TIMEOUT
        stored = len(self._stored())
        while stored <= before and time.monotonic() < deadline:
            self._relay(lines, 1.0)
            stored = len(self._stored())
        print(f"   kill -9 the Spark driver inside batch {PAUSE_FILE} ({stored} messages stored)")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        flag.unlink()
        return True

    def _second_spark_run(self) -> bool:
        process, lines = self._start_spark(self._spark_command(), "spark-2.log")
        deadline = time.monotonic() + SPARK_RUN_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            for line in self._relay(lines, 1.0):
                self.replayed += _already_stored(line)
                if self.broker.starts == 1:
                    print("   kill -9 the broker; restarting it")
                    self.broker.kill()
                    self.broker.start()
                    print("   broker back; the sink's producers and the consumer reconnect")
        self._relay(lines, 1.0)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            print("   the Spark query did not finish in time")
            return False
        if process.returncode != 0:
            print(f"   the Spark query failed (exit {process.returncode}), see {self.work_dir}")
            return False
        return True

    def _start_spark(
        self, command: list[str], log_name: str
    ) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
        """The query in its own process group (so that kill -9 takes its JVM along)."""
        with (self.work_dir / log_name).open("w") as log:
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
                cwd=PROJECT_ROOT,
            )
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line.strip())

        threading.Thread(target=pump, name="spark-output", daemon=True).start()
        return process, lines

    @staticmethod
    def _relay(lines: queue.Queue[str], wait: float) -> list[str]:
        """Print the query's batch lines that arrived (waiting up to ``wait`` for one)."""
        batches = []
        try:
            line = lines.get(timeout=wait)
            while True:
                if line.startswith("batch "):
                    print(f"   spark: {line}")
                    batches.append(line)
                line = lines.get_nowait()
        except queue.Empty:
            return batches

    # --- topic and consumer -----------------------------------------------------------
    def _consume(self, stop: threading.Event) -> ConsumeStats:
        def progress(applied: int) -> None:
            print(f"   consumer: {applied} of {self.total} results applied")

        return consume_into_results(
            self.broker.service_url, self.topic, self.database, self.total, stop, progress
        )

    def _stored(self) -> list[bytes]:
        """Everything the topic holds, read back from the start."""
        client = pulsar.Client(
            self.broker.service_url, operation_timeout_seconds=60, logger=quiet_client_logger()
        )
        try:
            reader = client.create_reader(self.topic, pulsar.MessageId.earliest)
            stored = []
            while reader.has_message_available():
                stored.append(reader.read_next(READ_MS).data())
            reader.close()
            return stored
        finally:
            client.close()


def _already_stored(line: str) -> int:
    """The ``already stored N`` figure of a batch line of the streaming job."""
    try:
        return int(line.split("already stored ")[1].split()[0])
    except (IndexError, ValueError):
        return 0
