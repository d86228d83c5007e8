"""A Spark standalone cluster on 127.0.0.1, and sessions for a local or a cluster master.

The pip ``pyspark`` package ships Spark's jars but not its ``sbin`` scripts, so the master
and the workers are started here as plain JVMs from those jars (``java -cp
<pyspark>/jars/* org.apache.spark.deploy.master.Master``), each a child process on free
ports, stopped (or killed with kill -9, its executors with it) by pid. A worker's
executors run the driver's Python (``PYSPARK_PYTHON``), which must have this project
installed, as the project's ``.venv`` has.

``python -m connectors.spark_cluster`` starts one for the demo (``DEMO_SPARK_MASTER``)
and keeps it until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from connectors.local_spark import local_session
from dedup_broker.devservers.pieces import ensure_java_home
from dedup_broker.devservers.process import (
    free_ports,
    kill_pid,
    pid_alive,
    spawn,
    stop_pid,
    wait_until,
)
from dedup_broker.errors import DevServerError

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"
"""Heap of the master and worker JVMs themselves (executors get their own)."""
START_TIMEOUT = 180.0
"""Patient: JVMs start slowly on a busy 2-core machine."""
STOP_GRACE = 20.0

CLUSTER_SETTINGS: dict[str, str] = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    # Spark's default on a cluster, set explicitly because the sink's guarantee needs it:
    # a failed task runs again (one lost with its executor runs elsewhere, uncounted).
    "spark.task.maxFailures": "4",
}
"""Settings of a driver on a cluster: small executors, failed tasks tried again."""
LOOPBACK_DRIVER_SETTINGS: dict[str, str] = {
    "spark.driver.host": HOST,
    "spark.driver.bindAddress": HOST,
}
"""For a cluster on 127.0.0.1: executors reach the driver on loopback too."""


def is_cluster_master(master: str) -> bool:
    """True for a standalone cluster's ``spark://host:port``."""
    return master.startswith("spark://")


def spark_session(
    master: str, app_name: str = "dedup-broker", extra: Mapping[str, str] | None = None
) -> Any:
    """``local_session``'s small session, on ``local[...]`` or a standalone cluster.

    On a cluster the executors get 1 core and 512 MiB each; on one at 127.0.0.1 the
    driver listens on loopback as well. ``extra`` overrides either.
    """
    settings: dict[str, str] = {}
    if is_cluster_master(master):
        settings.update(CLUSTER_SETTINGS)
        if urlsplit(master).hostname in (HOST, "localhost"):
            settings.update(LOOPBACK_DRIVER_SETTINGS)
            os.environ.setdefault("SPARK_LOCAL_IP", HOST)
    settings.update(extra or {})
    return local_session(master, app_name, settings)


def pyspark_home() -> Path:
    """The installed ``pyspark`` package: Spark's home, with ``jars/`` and ``bin/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def scala_version(home: Path) -> str:
    """Scala's binary version of the jars (``2.13``), which Spark's own launcher scripts
    export and a worker needs to build its executors' command line."""
    for jar in (home / "jars").glob("spark-core_*.jar"):
        return jar.name.removeprefix("spark-core_").partition("-")[0]
    raise DevServerError(f"no spark-core jar in {home / 'jars'}")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first), from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(below)
    return found


@dataclass
class _Daemon:
    """A master or worker JVM of ours."""

    name: str
    port: int
    webui_port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class SparkStandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1 (``cores`` and ``memory`` each)."""

    def __init__(
        self,
        work_dir: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
    ) -> None:
        self.work_dir = work_dir
        self.initial_workers = workers
        self.cores = cores
        self.memory = memory
        self.home = pyspark_home()
        master_port, master_ui = free_ports(2)
        self.master = _Daemon("master", master_port, master_ui, work_dir / "master.log")
        self.workers: list[_Daemon] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    # --- starting and stopping --------------------------------------------------------
    def start(self, wait: bool = True) -> None:
        """The master, then the workers; with ``wait``, returns once every worker has
        registered (else call ``wait_for_workers`` before the first driver, after other
        work that can overlap their start)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.master.process = self._spawn(
            self.master,
            [
                *(MASTER_CLASS, "--host", HOST, "--port", str(self.master.port)),
                *("--webui-port", str(self.master.webui_port)),
            ],
        )
        self._wait("the master to answer", lambda: self._state() is not None, self.master)
        for _ in range(self.initial_workers):
            self.add_worker(wait=False)
        if wait:
            self.wait_for_workers()

    def add_worker(self, wait: bool = True) -> int:
        """Start one more worker; its index. With ``wait``, return once the master counts
        it alive (else a driver may start meanwhile: the worker joins its application)."""
        index = len(self.workers)
        port, webui_port = free_ports(2)
        worker = _Daemon(f"worker-{index}", port, webui_port, self.work_dir / f"worker-{index}.log")
        self.workers.append(worker)
        work_dir = self.work_dir / f"worker-{index}"
        work_dir.mkdir(parents=True, exist_ok=True)
        worker.process = self._spawn(
            worker,
            [
                *(WORKER_CLASS, "--host", HOST, "--port", str(port)),
                *("--webui-port", str(webui_port), "--cores", str(self.cores)),
                *("--memory", self.memory, "--work-dir", str(work_dir), self.master_url),
            ],
        )
        if wait:
            self.wait_for_workers()
        return index

    def wait_for_workers(self) -> None:
        """Until the master counts every running worker alive."""
        for worker in self.workers:
            if worker.running():
                registered = functools.partial(self._registered, worker.port)
                self._wait("a worker to register", registered, worker)

    def _registered(self, port: int) -> bool:
        return port in self.alive_worker_ports()

    def stop(self) -> None:
        """Workers first (each stops its executors), then the master; by pid."""
        for daemon in [*self.workers, self.master]:
            if daemon.running():
                tree = descendants(daemon.pid)
                stop_pid(daemon.pid, STOP_GRACE, daemon.process)
                _kill_all([pid for pid in tree if pid_alive(pid)])

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- faults -------------------------------------------------------------------------
    def worker_holding(self, pid: int) -> int:
        """The index of the running worker whose process tree holds ``pid`` (an executor's
        JVM or one of its Python workers)."""
        for index, worker in enumerate(self.workers):
            if worker.running() and (pid == worker.pid or pid in descendants(worker.pid)):
                return index
        raise DevServerError(f"no running worker holds process {pid}")

    def kill_worker(self, index: int) -> None:
        """kill -9 a worker with everything it launched (executor JVMs, Python workers),
        as when its machine dies; returns once the master has dropped it."""
        worker = self.workers[index]
        os.kill(worker.pid, signal.SIGSTOP)  # launches nothing more while its tree is listed
        below = descendants(worker.pid)
        kill_pid(worker.pid, worker.process)
        _kill_all(below)
        self._wait(
            "the master to drop a killed worker",
            lambda: worker.port not in self.alive_worker_ports(),
            self.master,
        )

    def running_workers(self) -> list[int]:
        """Indexes of the workers whose process runs (not killed or stopped)."""
        return [index for index, worker in enumerate(self.workers) if worker.running()]

    # --- the master's view --------------------------------------------------------------
    def alive_worker_ports(self) -> set[int]:
        """Ports of the workers the master counts as ALIVE."""
        state = self._state() or {}
        return {
            int(worker["port"])
            for worker in state.get("workers", [])
            if worker.get("state") == "ALIVE"
        }

    def _state(self) -> dict[str, Any] | None:
        """The master's JSON status page, or None while it does not answer."""
        url = f"http://{HOST}:{self.master.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                state: dict[str, Any] = json.loads(response.read())
                return state
        except (OSError, ValueError):
            return None

    # --- plumbing -----------------------------------------------------------------------
    def _spawn(self, daemon: _Daemon, arguments: list[str]) -> subprocess.Popen[bytes]:
        ensure_java_home()  # as local_session does: a provisioned runtime without a system java
        java_home = os.environ.get("JAVA_HOME")
        java = os.path.join(java_home, "bin", "java") if java_home else "java"
        env = dict(
            os.environ,
            SPARK_HOME=str(self.home),
            SPARK_SCALA_VERSION=scala_version(self.home),
            SPARK_LOCAL_IP=HOST,
        )
        argv = [java, f"-Xmx{DAEMON_MEMORY}", "-cp", str(self.home / "jars" / "*"), *arguments]
        return spawn(argv, cwd=self.work_dir, log_path=daemon.log_path, detached=False, env=env)

    def _wait(self, what: str, condition: Callable[[], bool], daemon: _Daemon) -> None:
        """Until ``condition`` holds; fails early if ``daemon`` exits meanwhile."""

        def ready() -> bool:
            if not daemon.running():
                raise DevServerError(f"{daemon.name} exited; see {daemon.log_path}")
            return condition()

        if not wait_until(ready, START_TIMEOUT, interval=0.5):
            raise DevServerError(f"timed out waiting for {what}; see {daemon.log_path}")


def _sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_all(pids: list[int]) -> None:
    """kill -9 processes that are not our children, and wait until they are gone."""
    for pid in pids:
        _sigkill(pid)
    for pid in pids:
        if not wait_until(functools.partial(_gone, pid), 15.0):
            raise DevServerError(f"process {pid} survived SIGKILL for 15 s")


def _gone(pid: int) -> bool:
    return not pid_alive(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m connectors.spark_cluster",
        description="Run a Spark standalone cluster on 127.0.0.1 until Ctrl-C.",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker")
    parser.add_argument("--work-dir", type=Path, help="logs and executor directories")
    args = parser.parse_args(argv)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="dedup-broker-spark-"))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopped.set())
    cluster = SparkStandaloneCluster(work_dir, args.workers, args.cores, args.memory)
    try:
        cluster.start()
        print(f"Spark master {cluster.master_url} ({args.workers} workers; logs in {work_dir})")
        print(f"  e.g. DEMO_SPARK_MASTER={cluster.master_url} make demo", flush=True)
        while not stopped.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
