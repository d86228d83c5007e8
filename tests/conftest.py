"""Shared fixtures: a real Kafka, Redis and PostgreSQL, obtained lazily, released at the end.

Nothing starts unless a test asks for it, so unit tests never start servers. Where the
servers come from is ``dedup_broker.devservers.provision``'s choice: the environment
(``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``), else Docker, else native processes;
PostgreSQL is ``POSTGRES_URL`` or a native server. When none works the requesting test
fails with the reasons; it never skips.

Outage tests use ``native_kafka`` / ``native_redis``: a dedicated native server per
test, which may be stopped, killed and restarted on the same address.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TypeVar

import pytest

from dedup_broker.devservers import (
    KafkaService,
    PostgresService,
    RedisService,
    provide_kafka,
    provide_postgres,
    provide_redis,
)
from dedup_broker.devservers import unique_name as _unique_name
from dedup_broker.errors import DevServerError

# Every JVM the tests start (Kafka, Spark's driver, master, workers and executors, the
# Java clients) lives seconds to minutes and runs little code: C2's compiles would cost
# more CPU than they save (a Kafka start and 3,000 requests: 16 -> 9 s of CPU; a Spark
# session and a small job: 28 -> 15 s), and on a 2-core machine CPU is the suite's time.
# The JVM reads JAVA_TOOL_OPTIONS in every process, also those Spark and Kafka launch.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

# The Spark sink's fixtures (one SparkSession per run), shared by integration and chaos tests.
pytest_plugins = ["tests.integration.connectors.sink_fixtures"]


def _interrupt_on_sigterm() -> None:
    """Make SIGTERM end the run like Ctrl-C does, so fixture teardown stops our servers."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def raise_interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, raise_interrupt)


_Service = TypeVar("_Service", KafkaService, RedisService, PostgresService)


def _provided(factory: Callable[[], _Service], what: str) -> _Service:
    try:
        service = factory()
    except DevServerError as exc:
        pytest.fail(f"no {what} for the integration tests: {exc}", pytrace=False)
    if service.kind == "native":
        _interrupt_on_sigterm()
    return service


@pytest.fixture(scope="session")
def kafka_service() -> Iterator[KafkaService]:
    """The session's Kafka (external, Docker or native)."""
    service = _provided(provide_kafka, "Kafka")
    try:
        yield service
    finally:
        service.close()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_service: KafkaService) -> str:
    """``host:port`` of the session's Kafka."""
    return kafka_service.bootstrap_servers


@pytest.fixture(scope="session")
def redis_service() -> Iterator[RedisService]:
    """The session's Redis (external, Docker or native)."""
    service = _provided(provide_redis, "Redis")
    try:
        yield service
    finally:
        service.close()


@pytest.fixture(scope="session")
def redis_url(redis_service: RedisService) -> str:
    """``redis://host:port/db`` of the session's Redis."""
    return redis_service.url


@pytest.fixture(scope="session")
def postgres_service() -> Iterator[PostgresService]:
    """The session's PostgreSQL: ``POSTGRES_URL`` if set, else a native server."""
    service = _provided(provide_postgres, "PostgreSQL")
    try:
        yield service
    finally:
        service.close()


@pytest.fixture(scope="session")
def postgres_url(postgres_service: PostgresService) -> str:
    """``postgresql://user@host:port/db`` of the session's PostgreSQL."""
    return postgres_service.url


@pytest.fixture
def native_kafka() -> Iterator[KafkaService]:
    """A Kafka of this test's own that it may stop, kill and restart (same address)."""
    service = _provided(lambda: provide_kafka(controllable=True), "controllable Kafka")
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def native_redis() -> Iterator[RedisService]:
    """A Redis of this test's own, without persistence, that it may stop, kill and restart."""
    service = _provided(lambda: provide_redis(controllable=True), "controllable Redis")
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """``unique_name(prefix)`` -> ``prefix-<12 hex>``, for topic and cluster names."""
    return _unique_name


SOAK_VARIABLE = "SOAK"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``soak`` (longer repeats of what a bounded test in the suite covers)
    run only under ``SOAK=1``, as ``make soak`` sets."""
    if os.environ.get(SOAK_VARIABLE):
        return
    skip = pytest.mark.skip(reason=f"make soak runs it ({SOAK_VARIABLE}=1)")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)


_LOG_LINES_ON_FAILURE = 40
_LOGGED_LEVELS = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report shows the warnings and errors of the broker logs it left in
    ``tmp_path`` (the brokers were separate processes: their logs are not captured)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.passed or call.when != "call":
        return
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if tmp_path is None:
        return
    for path in sorted(tmp_path.rglob("broker-*.log"))[:8]:
        lines = path.read_text(errors="replace").splitlines()
        notable = [line for line in lines if any(level in line for level in _LOGGED_LEVELS)]
        if notable:
            shown = "\n".join(notable[-_LOG_LINES_ON_FAILURE:])
            report.sections.append((f"{path.relative_to(tmp_path)} (warnings)", shown))
