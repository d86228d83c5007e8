"""``dedup-broker standalone``: Kafka, Redis, the broker and a deletion worker in one command.

The counterpart of ``pulsar standalone``. Kafka comes from ``KAFKA_BOOTSTRAP_SERVERS`` when
set, else a native Kafka is started with its data in ``<data-dir>/kafka``; Redis likewise
from ``REDIS_URL`` or a native, append-only Redis in ``<data-dir>/redis``. Both directories
are reused, so topics and keys survive a restart of standalone. The broker and the
deletion worker run as ``dedup-broker serve`` / ``deletion-worker`` child processes with
the same ``-c`` / ``--set`` configuration.

This module composes processes; it knows the configuration, the development-server
launchers and the command line, never the broker's internals.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from dedup_broker.app.standalone_children import (
    SERVER_STOP_SECONDS,
    STOP_ORDER,
    Child,
    CommandChild,
    Role,
    ServerChild,
)
from dedup_broker.config import ENV_PREFIX, BrokerConfig, snake_case
from dedup_broker.devservers import NativeKafka, NativeRedis, process, provide_kafka, provide_redis
from dedup_broker.devservers.native import NativeServer
from dedup_broker.devservers.provision import KAFKA_ENV, REDIS_ENV
from dedup_broker.errors import ConfigError, DevServerError
from dedup_broker.pulsar_settings import is_pulsar_only

DEFAULT_DATA_DIR = Path("data/standalone")
DEFAULT_KAFKA_PORT = 9092
DEFAULT_KAFKA_CONTROLLER_PORT = 9093
DEFAULT_REDIS_PORT = 6379
DEFAULT_STARTUP_TIMEOUT_SECONDS = 120.0
WATCH_INTERVAL_SECONDS = 0.5
HEALTH_PATH = "/admin/v2/brokers/health"
WORKER_HEALTH_PATH = "/health"
PID_FILE = "standalone.pid"
PROVIDED_SETTINGS = {
    "kafka_bootstrap_servers": KAFKA_ENV,
    "redis_url": REDIS_ENV,
}
"""Settings standalone decides itself, and the variable that chooses an existing server."""
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")


class StandaloneError(Exception):
    """Something standalone started failed to start or died; the message says which."""


class ShutdownRequested(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException so no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class StandaloneOptions:
    data_dir: Path
    config_path: Path | None = None
    settings: dict[str, str] = field(default_factory=dict)
    """``--set`` overrides for the broker and the worker (Pulsar names, as given)."""
    worker: bool = True
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    redis_port: int = DEFAULT_REDIS_PORT
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_SECONDS
    log_level: str = "INFO"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StandaloneOptions:
        return cls(
            data_dir=Path(args.data_dir).resolve(),
            config_path=Path(args.config).resolve() if args.config else None,
            settings=parse_settings(args.set or []),
            worker=not args.no_worker,
            kafka_port=args.kafka_port,
            kafka_controller_port=args.kafka_controller_port,
            redis_port=args.redis_port,
            startup_timeout=args.startup_timeout,
            log_level=args.log_level,
        )

    def config_arguments(self) -> list[str]:
        """The ``-c`` / ``--set`` arguments both child commands get."""
        arguments = ["-c", str(self.config_path)] if self.config_path is not None else []
        for key, value in self.settings.items():
            arguments += ["--set", f"{key}={value}"]
        return arguments


def parse_settings(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; Kafka's and Redis's addresses are refused (Pulsar's
    settings that have no effect go through, the broker warns about them)."""
    settings: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        name = "" if is_pulsar_only(key.strip()) else snake_case(key.strip())
        if name in PROVIDED_SETTINGS:
            raise ConfigError(
                f"standalone chooses {key.strip()} itself: set {PROVIDED_SETTINGS[name]} "
                "to use an existing server"
            )
        settings[key.strip()] = value
    return settings


@dataclass(frozen=True)
class Endpoints:
    service_url: str
    web_service_url: str
    kafka_bootstrap_servers: str
    redis_url: str
    kafka_started_here: bool
    redis_started_here: bool


class Standalone:
    """Start in dependency order, watch, stop in ``STOP_ORDER``."""

    def __init__(self, options: StandaloneOptions, config: BrokerConfig) -> None:
        self.options = options
        self.config = config
        self.children: list[Child] = []
        self.log_dir = options.data_dir / "logs"

    # --- start --------------------------------------------------------------------
    def start(self) -> Endpoints:
        kafka, kafka_here = self._kafka()
        redis, redis_here = self._redis()
        env = dict(os.environ)
        env[ENV_PREFIX + "KAFKA_BOOTSTRAP_SERVERS"] = kafka
        env[ENV_PREFIX + "REDIS_URL"] = redis
        web_port = self.config.web_service_port
        if web_port is None:
            raise StandaloneError("standalone needs the plain webServicePort (its health check)")
        self._run_command(Role.BROKER, "serve", env)
        self._wait_healthy(Role.BROKER, web_port, HEALTH_PATH)
        if self.options.worker:
            self._run_command(Role.DELETION_WORKER, "deletion-worker", env)
            port = self.config.deletion_worker_web_service_port
            if port > 0:
                self._wait_healthy(Role.DELETION_WORKER, port, WORKER_HEALTH_PATH)
        advertised = self.config.advertised_address
        broker_port = self.config.broker_service_port
        return Endpoints(
            service_url=(
                f"pulsar://{advertised}:{broker_port}"
                if broker_port is not None
                else f"pulsar+ssl://{advertised}:{self.config.broker_service_port_tls}"
            ),
            web_service_url=f"http://{advertised}:{web_port}",
            kafka_bootstrap_servers=kafka,
            redis_url=redis,
            kafka_started_here=kafka_here,
            redis_started_here=redis_here,
        )

    def _kafka(self) -> tuple[str, bool]:
        external = os.environ.get(KAFKA_ENV, "").strip()
        if external:
            _say(f"using Kafka at {external} ({KAFKA_ENV})")
            return provide_kafka(environ={KAFKA_ENV: external}).bootstrap_servers, False
        kafka = NativeKafka(
            self.options.data_dir / "kafka",
            port=self.options.kafka_port,
            controller_port=self.options.kafka_controller_port,
            startup_timeout=self.options.startup_timeout,
            stop_timeout=SERVER_STOP_SECONDS,
        )
        _say(f"starting Kafka on {kafka.bootstrap_servers} (data {kafka.data_dir}) ...")
        self._launch(Role.KAFKA, kafka)
        return kafka.bootstrap_servers, True

    def _redis(self) -> tuple[str, bool]:
        external = os.environ.get(REDIS_ENV, "").strip()
        if external:
            _say(f"using Redis at {external} ({REDIS_ENV})")
            return provide_redis(environ={REDIS_ENV: external}).url, False
        redis = NativeRedis(
            self.options.data_dir / "redis",
            port=self.options.redis_port,
            persistent=True,
            startup_timeout=self.options.startup_timeout,
            stop_timeout=SERVER_STOP_SECONDS,
        )
        _say(f"starting Redis on {redis.url} (data {redis.data_dir}) ...")
        self._launch(Role.REDIS, redis)
        return redis.url, True

    def _launch(self, role: Role, server: NativeServer) -> None:
        try:
            server.start()
        except DevServerError as exc:
            raise StandaloneError(f"{role.value} did not start: {exc}") from None
        self.children.append(ServerChild(role, server))

    def _run_command(self, role: Role, command: str, env: dict[str, str]) -> None:
        argv = [
            sys.executable,
            "-m",
            "dedup_broker.app.cli",
            "--log-level",
            self.options.log_level,
            command,
            *self.options.config_arguments(),
        ]
        _say(f"starting the {role.value} (log {self.log_dir / f'{role.value}.log'}) ...")
        try:
            child = CommandChild(role, argv, env, self.log_dir / f"{role.value}.log")
        except DevServerError as exc:
            raise StandaloneError(f"{role.value} did not start: {exc}") from None
        self.children.append(child)

    def _wait_healthy(self, role: Role, port: int, path: str) -> None:
        host = self.config.bind_address
        host = "127.0.0.1" if host in WILDCARD_ADDRESSES else host
        url = f"http://{host}:{port}{path}"
        deadline = time.monotonic() + self.options.startup_timeout
        while time.monotonic() < deadline:
            self.check_children()
            if _answers_ok(url):
                return
            time.sleep(0.2)
        child = self._child(role)
        raise StandaloneError(
            f"the {role.value} did not answer {url} within {self.options.startup_timeout:.0f} s "
            f"(log {child.log_path}):\n{process.tail(child.log_path)}"
        )

    def _child(self, role: Role) -> Child:
        return next(child for child in self.children if child.role is role)

    # --- watch and stop -----------------------------------------------------------
    def check_children(self) -> None:
        """Raise ``StandaloneError`` naming the first started process that is gone."""
        for child in self.children:
            if not child.alive():
                raise StandaloneError(
                    f"the {child.role.value} (pid {child.pid}) stopped unexpectedly "
                    f"({child.exit_status()}); log {child.log_path}:\n"
                    f"{process.tail(child.log_path, 20)}"
                )

    def watch(self) -> None:
        """Until a signal (raised as ``ShutdownRequested``) or a child's death."""
        while True:
            self.check_children()
            time.sleep(WATCH_INTERVAL_SECONDS)

    def stop(self) -> bool:
        """Stop everything started here, in ``STOP_ORDER``; False if something resisted."""
        clean = True
        for role in STOP_ORDER:
            for child in [c for c in self.children if c.role is role]:
                was_running = child.alive()
                try:
                    child.stop()
                except DevServerError as exc:
                    _say(f"could not stop the {role.value} (pid {child.pid}): {exc}")
                    clean = False
                    continue
                if was_running:
                    _say(f"stopped the {role.value} (pid {child.pid})")
                self.children.remove(child)
        return clean


# --- the command ----------------------------------------------------------------------
def run_standalone(args: argparse.Namespace) -> int:
    """``dedup-broker standalone``: 0 after a signal, 1 when something failed or died."""
    options = StandaloneOptions.from_args(args)
    config = BrokerConfig.load(options.config_path, overrides=options.settings)
    options.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        _claim_data_dir(options.data_dir)
        _check_ports_free(options, config)
    except StandaloneError as exc:
        _say(f"error: {exc}")
        _release_data_dir(options.data_dir)
        return 1
    _say(f"data directory {options.data_dir}")
    standalone = Standalone(options, config)
    previous = _on_shutdown_signals(_raise_shutdown)
    code = 0
    try:
        endpoints = standalone.start()
        _print_ready(endpoints, standalone.children)
        standalone.watch()
    except ShutdownRequested as request:
        _on_shutdown_signals(_ignore_repeated)
        _say(f"{signal.Signals(request.signum).name}: stopping")
    except (StandaloneError, DevServerError) as exc:
        _on_shutdown_signals(_ignore_repeated)
        _say(f"error: {exc}")
        _say("stopping everything standalone started")
        code = 1
    finally:
        _on_shutdown_signals(_ignore_repeated)
        if not standalone.stop():
            code = 1
        _release_data_dir(options.data_dir)
        _restore_signals(previous)
    _say("stopped" if code == 0 else f"exiting with code {code}")
    return code


def _claim_data_dir(data_dir: Path) -> None:
    """One standalone per data directory: its Kafka and Redis files are not shareable."""
    pid_file = data_dir / PID_FILE
    other = process.read_pid_file(pid_file)
    if other is not None and other != os.getpid() and process.pid_alive(other):
        cmdline = process.pid_cmdline(other)
        if cmdline is None or "standalone" in cmdline:
            raise StandaloneError(f"another standalone (pid {other}) uses {data_dir}")
    process.write_pid_file(pid_file, os.getpid())


def _release_data_dir(data_dir: Path) -> None:
    if process.read_pid_file(data_dir / PID_FILE) == os.getpid():
        process.remove_file(data_dir / PID_FILE)


def _check_ports_free(options: StandaloneOptions, config: BrokerConfig) -> None:
    """Name a taken port now rather than after Kafka took a minute to start."""
    wanted = {
        name: port
        for name, port in (
            ("brokerServicePort", config.broker_service_port),
            ("webServicePort", config.web_service_port),
            ("brokerServicePortTls", config.broker_service_port_tls),
            ("webServicePortTls", config.web_service_port_tls),
        )
        if port is not None
    }
    if options.worker and config.deletion_worker_web_service_port > 0:
        wanted["deletionWorkerWebServicePort"] = config.deletion_worker_web_service_port
    if not os.environ.get(KAFKA_ENV, "").strip():
        wanted["--kafka-port"] = options.kafka_port
        wanted["--kafka-controller-port"] = options.kafka_controller_port
    if not os.environ.get(REDIS_ENV, "").strip():
        wanted["--redis-port"] = options.redis_port
    taken = [
        f"{port} ({name})"
        for name, port in wanted.items()
        if process.port_accepts(port) or not process.port_bindable(port)
    ]
    if taken:
        raise StandaloneError(
            f"port(s) already in use on 127.0.0.1: {', '.join(taken)}; stop what holds them "
            "or choose others (--set brokerServicePort=..., --kafka-port ..., ...)"
        )


def _print_ready(endpoints: Endpoints, children: Sequence[Child]) -> None:
    kafka_origin = "started here" if endpoints.kafka_started_here else "external"
    redis_origin = "started here" if endpoints.redis_started_here else "external"
    lines = [
        "dedup-broker standalone is ready",
        f"  Pulsar service URL: {endpoints.service_url}",
        f"  HTTP service URL:   {endpoints.web_service_url}",
        f"  Kafka bootstrap:    {endpoints.kafka_bootstrap_servers} ({kafka_origin})",
        f"  Redis URL:          {endpoints.redis_url} ({redis_origin})",
        "processes started here:",
        *(f"  {c.role.value:<16} pid {c.pid:<8} log {c.log_path}" for c in children),
        "Ctrl-C (or SIGTERM) stops them all.",
    ]
    print("\n".join(lines), flush=True)


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _raise_shutdown(signum: int, frame: FrameType | None) -> None:
    raise ShutdownRequested(signum)


def _ignore_repeated(signum: int, frame: FrameType | None) -> None:
    _say(f"{signal.Signals(signum).name}: already stopping (each stop is bounded)")


SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def _on_shutdown_signals(handler: SignalHandler) -> dict[signal.Signals, SignalHandler]:
    """Install ``handler`` for SIGINT and SIGTERM; return the handlers it replaced."""
    replaced: dict[signal.Signals, SignalHandler] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: the caller decides
            replaced[signum] = signal.signal(signum, handler)
    return replaced


def _restore_signals(handlers: dict[signal.Signals, SignalHandler]) -> None:
    for signum, handler in handlers.items():
        with contextlib.suppress(ValueError):
            signal.signal(signum, handler)


def _say(message: str) -> None:
    print(f"standalone: {message}", flush=True)


def add_standalone_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    config_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``standalone`` (``-c`` / ``--set`` as for ``serve``, passed to the broker)."""
    command = commands.add_parser(
        "standalone",
        help="Kafka, Redis, the broker and a deletion worker in one command (Ctrl-C stops)",
        description=(
            "Run the broker with everything it needs: Kafka from KAFKA_BOOTSTRAP_SERVERS or "
            "a native one, Redis from REDIS_URL or a native one, and a deletion worker."
        ),
    )
    config_options(command)
    command.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"Kafka's and Redis's data and the logs, kept (default {DEFAULT_DATA_DIR})",
    )
    command.add_argument("--no-worker", action="store_true", help="no deletion worker")
    command.add_argument(
        "--kafka-port", type=int, default=DEFAULT_KAFKA_PORT, help="native Kafka's port"
    )
    command.add_argument(
        "--kafka-controller-port",
        type=int,
        default=DEFAULT_KAFKA_CONTROLLER_PORT,
        help="native Kafka's controller port",
    )
    command.add_argument(
        "--redis-port", type=int, default=DEFAULT_REDIS_PORT, help="native Redis's port"
    )
    command.add_argument(
        "--startup-timeout",
        type=float,
        default=DEFAULT_STARTUP_TIMEOUT_SECONDS,
        help="seconds each server may take to answer",
    )
    command.set_defaults(func=run_standalone)
