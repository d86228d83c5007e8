"""``dedup-broker dev ...``: a native Kafka and Redis started by hand, detached.

Each server's directory holds a pid file and a small state file, so ``*-down`` and
``status`` find the server from a later shell; a pid is only signalled after its command
line confirms it is the server it claims to be.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dedup_broker.devservers import process
from dedup_broker.devservers.kafka import KAFKA_MAIN, NativeKafka
from dedup_broker.devservers.kafka_cluster import NativeKafkaCluster
from dedup_broker.devservers.native import NativeServer
from dedup_broker.devservers.preflight import add_preflight_command
from dedup_broker.devservers.redis import NativeRedis
from dedup_broker.errors import DevServerError

DEFAULT_KAFKA_DIR = Path("var/kafka")
DEFAULT_REDIS_DIR = Path("var/redis")

Handler = Callable[[argparse.Namespace], int]


def add_dev_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``dev`` and its sub-commands; each sets ``func`` (Namespace -> exit code)."""
    dev = subparsers.add_parser("dev", help="run a local Kafka and Redis by hand")
    commands = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)

    up = commands.add_parser("kafka-up", help="start a native Kafka in the background")
    up.add_argument("--port", type=int, default=9092, help="PLAINTEXT port (default 9092)")
    up.add_argument("--controller-port", type=int, default=9093, help="default 9093")
    up.add_argument("--data-dir", type=Path, default=DEFAULT_KAFKA_DIR)
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for it")
    up.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="a cluster of N nodes, replicated as in production (docs/deployment.md); "
        "node i listens on PORT+2i and CONTROLLER_PORT+2i",
    )
    up.set_defaults(func=kafka_up)

    down = commands.add_parser("kafka-down", help="stop the Kafka started by kafka-up")
    down.add_argument("--data-dir", type=Path, default=DEFAULT_KAFKA_DIR)
    down.add_argument("--timeout", type=float, default=30.0, help="grace before SIGKILL")
    down.set_defaults(func=kafka_down)

    rup = commands.add_parser("redis-up", help="start a native Redis in the background")
    rup.add_argument("--port", type=int, default=6379, help="default 6379")
    rup.add_argument("--data-dir", type=Path, default=DEFAULT_REDIS_DIR)
    rup.add_argument("--persistent", action="store_true", help="append-only file, fsync always")
    rup.add_argument("--timeout", type=float, default=20.0)
    rup.set_defaults(func=redis_up)

    rdown = commands.add_parser("redis-down", help="stop the Redis started by redis-up")
    rdown.add_argument("--data-dir", type=Path, default=DEFAULT_REDIS_DIR)
    rdown.add_argument("--timeout", type=float, default=10.0)
    rdown.set_defaults(func=redis_down)

    add_preflight_command(commands)

    status = commands.add_parser("status", help="show what kafka-up/redis-up started")
    status.add_argument("--kafka-data-dir", type=Path, default=DEFAULT_KAFKA_DIR)
    status.add_argument("--redis-data-dir", type=Path, default=DEFAULT_REDIS_DIR)
    status.set_defaults(func=show_status)


# --- Kafka ----------------------------------------------------------------------------
def kafka_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    if args.nodes != 1:
        return kafka_cluster_up(args)

    def launch() -> tuple[NativeServer, str, dict[str, object]]:
        launcher = NativeKafka(
            data_dir,
            port=args.port,
            controller_port=args.controller_port,
            startup_timeout=args.timeout,
            detached=True,
        )
        launcher.start()
        state = {
            "controller_port": launcher.controller_port,
            "version": launcher.version,
            "log": str(launcher.log_path),
        }
        return launcher, launcher.bootstrap_servers, state

    return _up(data_dir, "kafka", KAFKA_MAIN, "Kafka", launch)


def kafka_cluster_up(args: argparse.Namespace) -> int:
    """``kafka-up --nodes N``: one state file per node (``kafka-<id>``), all started together."""
    data_dir: Path = args.data_dir.resolve()
    nodes = args.nodes
    names = [f"kafka-{node_id}" for node_id in range(1, nodes + 1)]
    running = [name for name in names if _running_pid(data_dir, name, KAFKA_MAIN) is not None]
    if running:
        addresses = [_read_state(data_dir, name).get("address", "?") for name in running]
        _info(f"Kafka nodes already running: {', '.join(addresses)}")
        print(",".join(addresses))
        return 0
    try:
        cluster = NativeKafkaCluster(
            data_dir,
            nodes=nodes,
            ports=[args.port + 2 * i for i in range(nodes)],
            controller_ports=[args.controller_port + 2 * i for i in range(nodes)],
            startup_timeout=args.timeout,
            detached=True,
        )
        cluster.start()
    except DevServerError as exc:
        _info(f"error: {exc}")
        return 1
    for name, node in zip(names, cluster.nodes, strict=True):
        pid = node.pid
        assert pid is not None
        state = {"address": node.bootstrap_servers, "log": str(node.log_path)}
        _write_state(data_dir, name, pid, state)
    _info(f"Kafka cluster of {nodes} nodes running (data {data_dir})")
    print(cluster.bootstrap_servers)
    return 0


def kafka_down(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    node_names = sorted(path.stem for path in data_dir.glob("kafka-*.pid"))
    if not node_names:
        return _down(data_dir, "kafka", KAFKA_MAIN, "Kafka", args.timeout)
    # Together: stopped one by one, the last nodes would wait for a quorum that is gone.
    with concurrent.futures.ThreadPoolExecutor(len(node_names)) as pool:
        codes = list(
            pool.map(
                lambda name: _down(data_dir, name, KAFKA_MAIN, f"Kafka {name}", args.timeout),
                node_names,
            )
        )
    return max(codes)


# --- Redis ----------------------------------------------------------------------------
def redis_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()

    def launch() -> tuple[NativeServer, str, dict[str, object]]:
        launcher = NativeRedis(
            data_dir,
            port=args.port,
            persistent=args.persistent,
            startup_timeout=args.timeout,
            detached=True,
        )
        launcher.start()
        state = {"persistent": launcher.persistent, "log": str(launcher.log_path)}
        return launcher, launcher.url, state

    return _up(data_dir, "redis", "redis-server", "Redis", launch)


def redis_down(args: argparse.Namespace) -> int:
    return _down(args.data_dir.resolve(), "redis", "redis-server", "Redis", args.timeout)


# --- status ---------------------------------------------------------------------------
def show_status(args: argparse.Namespace) -> int:
    for name, label, marker, data_dir in (
        ("kafka", "Kafka", KAFKA_MAIN, args.kafka_data_dir.resolve()),
        ("redis", "Redis", "redis-server", args.redis_data_dir.resolve()),
    ):
        pid = _running_pid(data_dir, name, marker)
        if pid is None:
            print(f"{label}: not running (data {data_dir})")
        else:
            address = _read_state(data_dir, name).get("address", "?")
            print(f"{label}: running at {address} (pid {pid}, data {data_dir})")
    return 0


# --- shared ---------------------------------------------------------------------------
def _up(
    data_dir: Path,
    name: str,
    marker: str,
    label: str,
    launch: Callable[[], tuple[NativeServer, str, dict[str, object]]],
) -> int:
    """Start a detached server unless one runs from ``data_dir``; print its address."""
    running = _running_pid(data_dir, name, marker)
    if running is not None:
        state = _read_state(data_dir, name)
        _info(f"{label} already running at {state.get('address')} (pid {running})")
        print(state.get("address", ""))
        return 0
    try:
        launcher, address, extra = launch()
    except DevServerError as exc:
        _info(f"error: {exc}")
        return 1
    pid = launcher.pid
    assert pid is not None
    _write_state(data_dir, name, pid, {"address": address, **extra})
    _info(f"{label} running (pid {pid}, data {data_dir})")
    print(address)
    return 0


def _down(data_dir: Path, name: str, marker: str, label: str, grace: float) -> int:
    pid = _running_pid(data_dir, name, marker)
    if pid is None:
        _info(f"{label} is not running (data {data_dir})")
        _clear_state(data_dir, name)
        return 0
    try:
        process.stop_pid(pid, grace)
    except DevServerError as exc:
        _info(f"error: {exc}")
        return 1
    _clear_state(data_dir, name)
    _info(f"{label} stopped (pid {pid})")
    return 0


def _running_pid(data_dir: Path, name: str, marker: str) -> int | None:
    """The pid from the pid file if that process is alive and really is the server."""
    pid = process.read_pid_file(data_dir / f"{name}.pid")
    if pid is None or not process.pid_alive(pid):
        return None
    cmdline = process.pid_cmdline(pid)
    if cmdline is not None and marker not in " ".join(cmdline):
        return None  # the pid was reused by an unrelated process
    return pid


def _write_state(data_dir: Path, name: str, pid: int, state: dict[str, Any]) -> None:
    (data_dir / f"{name}.json").write_text(json.dumps({"pid": pid, **state}, indent=2) + "\n")
    process.write_pid_file(data_dir / f"{name}.pid", pid)


def _read_state(data_dir: Path, name: str) -> dict[str, Any]:
    try:
        loaded = json.loads((data_dir / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _clear_state(data_dir: Path, name: str) -> None:
    process.remove_file(data_dir / f"{name}.pid")
    process.remove_file(data_dir / f"{name}.json")


def _info(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m dedup_broker.devservers.cli dev kafka-up``."""
    parser = argparse.ArgumentParser(prog="dedup-broker")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_dev_commands(subparsers)
    args = parser.parse_args(argv)
    handler: Handler = args.func
    try:
        return handler(args)
    except DevServerError as exc:
        _info(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
