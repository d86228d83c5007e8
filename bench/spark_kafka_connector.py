"""Spark's own Kafka connector (``spark-sql-kafka-0-10``), resolved once with Maven.

The jars land in ``<cache>/spark-sql-kafka-<version>`` next to the native Kafka's (see
``dedup_broker.devservers.distribution``). The connector of the installed Spark version
is tried first; when Maven Central does not serve it (a Spark release newer than its
connector, or a partial mirror), the major version's ``.0.0`` connector is used, whose
data-source API the later minor releases keep.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from dedup_broker.devservers.distribution import MARKER, cache_root, copy_maven_dependencies
from dedup_broker.errors import DevServerError

VERSION_ENV = "DEDUP_BROKER_SPARK_KAFKA_VERSION"
NEEDED = (
    "spark-sql-kafka-0-10",
    "spark-token-provider-kafka-0-10",
    "kafka-clients",
    "commons-pool2",
)
"""The jars Spark itself lacks; the rest of the connector's dependencies ship with Spark."""

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dedup-broker.bench</groupId>
  <artifactId>spark-kafka-connector</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_{scala}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""

_SETTINGS = """<settings>
  <mirrors>
    <!-- Spark's parent POM names a Google Cloud mirror of Central; use Central itself. -->
    <mirror>
      <id>spark-parent-mirror-to-central</id>
      <mirrorOf>gcs-maven-central-mirror</mirrorOf>
      <url>https://repo.maven.apache.org/maven2</url>
    </mirror>
  </mirrors>
</settings>
"""


def connector_jars(spark_version: str, scala_version: str = "2.13") -> list[Path]:
    """The connector's jars for ``spark.jars``; resolves them on first use."""
    override = os.environ.get(VERSION_ENV)
    major = spark_version.split(".")[0]
    candidates = [override] if override else [spark_version, f"{major}.0.0"]
    errors = []
    for version in dict.fromkeys(candidates):
        try:
            return _ensure(version, scala_version)
        except DevServerError as exc:
            errors.append(f"{version}: {exc}")
    raise DevServerError("spark-sql-kafka could not be resolved:\n" + "\n".join(errors))


def _ensure(version: str, scala: str) -> list[Path]:
    home = cache_root() / f"spark-sql-kafka-{scala}-{version}"
    if not (home / MARKER).is_file():
        home.mkdir(parents=True, exist_ok=True)
        with (home.parent / f"{home.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (home / MARKER).is_file():
                _resolve(home, version, scala)
    return sorted(jar for jar in (home / "libs").glob("*.jar") if jar.name.startswith(NEEDED))


def _resolve(home: Path, version: str, scala: str) -> None:
    (home / "pom.xml").write_text(_POM.format(scala=scala, version=version))
    (home / "settings.xml").write_text(_SETTINGS)
    names = copy_maven_dependencies(
        home,
        home / "pom.xml",
        f"spark-sql-kafka {version}",
        ("-s", str(home / "settings.xml")),
    )
    if not all(any(n.startswith(p) for n in names) for p in NEEDED):
        raise DevServerError(f"Maven resolved only {names} (log: {home / 'mvn.log'})")
    (home / MARKER).write_text("\n".join(sorted(names)) + "\n")
