"""Where the Kafka and Redis for tests and demos come from, behind one handle shape.

The order is fixed: an existing server named by the environment (``KAFKA_BOOTSTRAP_SERVERS``,
``REDIS_URL``); else containers when a Docker engine answers; else native processes.
``DEDUP_BROKER_DEV_SERVERS=native`` (or ``docker``) skips the Docker probe (or the native
fallback). Only native servers can be stopped, killed and restarted on the same address,
so outage tests ask for ``controllable=True``, which always launches a native one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Literal, TypeVar

from dedup_broker.devservers import containers
from dedup_broker.devservers.kafka import NativeKafka
from dedup_broker.devservers.postgres import NativePostgres
from dedup_broker.devservers.postgres import ping as postgres_ping
from dedup_broker.devservers.redis import NativeRedis, ping
from dedup_broker.errors import DevServerError

ServiceKind = Literal["external", "docker", "native"]
KAFKA_ENV = "KAFKA_BOOTSTRAP_SERVERS"
REDIS_ENV = "REDIS_URL"
POSTGRES_ENV = "POSTGRES_URL"
MODE_ENV = "DEDUP_BROKER_DEV_SERVERS"
EXTERNAL_CHECK_TIMEOUT_SECONDS = 10.0

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class _Service:
    """What every handle shares: its kind, and process control for native servers only."""

    what = "server"

    def __init__(
        self,
        kind: ServiceKind,
        address: str,
        native: NativeKafka | NativeRedis | NativePostgres | None = None,
        container: containers.KafkaInDocker | containers.RedisInDocker | None = None,
    ) -> None:
        self.kind: ServiceKind = kind
        self._address = address
        self._native = native
        self._container = container

    @property
    def controllable(self) -> bool:
        """True when ``start()``, ``kill()`` and restarts on the same address work."""
        return self._native is not None

    @property
    def pid(self) -> int | None:
        """The server's pid (native only; None while stopped)."""
        return self._native.pid if self._native is not None else None

    def stop(self) -> None:
        """Stop what this handle started; an external server is left alone.

        A native server keeps its address and data and can be started again.
        """
        if self._native is not None:
            self._native.stop()
        elif self._container is not None:
            self._container.stop()

    def start(self) -> None:
        """Start a stopped native server again, on the same address and data."""
        self._require_control("start").start()

    def kill(self) -> None:
        """SIGKILL the native server, as a crash would."""
        self._require_control("kill").kill()

    def close(self) -> None:
        """Release for good: stop, and remove a native server's temporary data."""
        if self._native is not None:
            self._native.close()
        else:
            self.stop()

    def _require_control(self, action: str) -> NativeKafka | NativeRedis | NativePostgres:
        if self._native is None:
            raise DevServerError(
                f"cannot {action} the {self.kind} {self.what} at {self._address}: only a "
                f"native {self.what} is under this process's control (provide one with "
                "controllable=True)"
            )
        return self._native

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, address={self._address!r})"


class KafkaService(_Service):
    """A Kafka to talk to, wherever it runs."""

    what = "Kafka"

    @property
    def bootstrap_servers(self) -> str:
        return self._address

    @property
    def native(self) -> NativeKafka | None:
        """The launcher, for native servers (ports, data directory, log)."""
        return self._native if isinstance(self._native, NativeKafka) else None


class RedisService(_Service):
    """A Redis to talk to, wherever it runs."""

    what = "Redis"

    @property
    def url(self) -> str:
        return self._address

    @property
    def native(self) -> NativeRedis | None:
        return self._native if isinstance(self._native, NativeRedis) else None


class PostgresService(_Service):
    """A PostgreSQL to talk to: external (``POSTGRES_URL``) or native."""

    what = "PostgreSQL"

    @property
    def url(self) -> str:
        return self._address

    @property
    def native(self) -> NativePostgres | None:
        return self._native if isinstance(self._native, NativePostgres) else None


def provide_kafka(
    *,
    controllable: bool = False,
    environ: Mapping[str, str] | None = None,
    native_heap: str | None = None,
) -> KafkaService:
    """A running Kafka: external, else Docker, else native (always native if controllable).

    ``native_heap`` (``-Xmx``, e.g. ``2g``) sizes a native Kafka's JVM (default 512m)."""
    env = os.environ if environ is None else environ
    if controllable:
        return _native_kafka(native_heap)
    external = env.get(KAFKA_ENV, "").strip()
    if external:
        _check_external_kafka(external)
        _log.info("using the external Kafka at %s", external)
        return KafkaService("external", external)
    return _first_working(
        "Kafka",
        KAFKA_ENV,
        _mode(env),
        docker=_docker_kafka,
        native=lambda: _native_kafka(native_heap),
    )


def provide_redis(
    *,
    controllable: bool = False,
    persistent: bool = False,
    environ: Mapping[str, str] | None = None,
) -> RedisService:
    """A running Redis: external, else Docker, else native (always native if controllable).

    ``persistent`` only applies to native servers; containers run without persistence.
    """
    env = os.environ if environ is None else environ
    if controllable or persistent:
        return _native_redis(persistent)
    external = env.get(REDIS_ENV, "").strip()
    if external:
        if not ping(external, timeout=EXTERNAL_CHECK_TIMEOUT_SECONDS):
            raise DevServerError(f"{REDIS_ENV}={external} is set but that Redis does not answer")
        _log.info("using the external Redis at %s", external)
        return RedisService("external", external)
    return _first_working(
        "Redis",
        REDIS_ENV,
        _mode(env),
        docker=_docker_redis,
        native=lambda: _native_redis(persistent),
    )


def provide_postgres(
    *, controllable: bool = False, environ: Mapping[str, str] | None = None
) -> PostgresService:
    """A running PostgreSQL: ``POSTGRES_URL`` if set, else a native server (no Docker)."""
    env = os.environ if environ is None else environ
    external = "" if controllable else env.get(POSTGRES_ENV, "").strip()
    if external:
        if not postgres_ping(external, timeout=EXTERNAL_CHECK_TIMEOUT_SECONDS):
            raise DevServerError(
                f"{POSTGRES_ENV}={external} is set but that PostgreSQL does not answer"
            )
        _log.info("using the external PostgreSQL at %s", external)
        return PostgresService("external", external)
    launcher = NativePostgres()
    try:
        launcher.start()
    except BaseException:
        launcher.close()
        raise
    return PostgresService("native", launcher.url, native=launcher)


def _mode(env: Mapping[str, str]) -> str:
    mode = env.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "docker", "native"):
        raise DevServerError(f"{MODE_ENV} must be auto, docker or native, got {mode!r}")
    return mode


def _first_working(
    what: str, env_name: str, mode: str, *, docker: Callable[[], _T], native: Callable[[], _T]
) -> _T:
    failures: list[str] = [f"{env_name} is not set"]
    if mode in ("auto", "docker"):
        if containers.docker_available():
            try:
                return docker()
            except DevServerError as exc:
                failures.append(f"Docker: {exc}")
        else:
            failures.append("no Docker engine answered")
    if mode in ("auto", "native"):
        try:
            return native()
        except DevServerError as exc:
            failures.append(f"native launcher: {exc}")
    raise DevServerError(f"no {what} available:\n- " + "\n- ".join(failures))


def _docker_kafka() -> KafkaService:
    container = containers.KafkaInDocker()
    address = container.start()
    _log.info("Kafka container at %s", address)
    return KafkaService("docker", address, container=container)


def _docker_redis() -> RedisService:
    container = containers.RedisInDocker()
    url = container.start()
    _log.info("Redis container at %s", url)
    return RedisService("docker", url, container=container)


def _native_kafka(heap: str | None = None) -> KafkaService:
    launcher = NativeKafka() if heap is None else NativeKafka(heap=heap)
    try:
        launcher.start()
    except BaseException:
        launcher.close()
        raise
    return KafkaService("native", launcher.bootstrap_servers, native=launcher)


def _native_redis(persistent: bool) -> RedisService:
    launcher = NativeRedis(persistent=persistent)
    try:
        launcher.start()
    except BaseException:
        launcher.close()
        raise
    return RedisService("native", launcher.url, native=launcher)


def _check_external_kafka(bootstrap_servers: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    try:
        metadata = admin.list_topics(timeout=EXTERNAL_CHECK_TIMEOUT_SECONDS)
    except Exception as exc:
        raise DevServerError(
            f"{KAFKA_ENV}={bootstrap_servers} is set but that Kafka does not answer: {exc}"
        ) from exc
    if not metadata.brokers:
        raise DevServerError(f"{KAFKA_ENV}={bootstrap_servers}: the cluster reports no brokers")
