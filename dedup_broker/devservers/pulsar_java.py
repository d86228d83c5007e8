"""The official Pulsar Java client, resolved from Maven Central, for compatibility runs.

Most Pulsar applications use the Java client, so the test suite proves the broker against
it: ``ensure_java_client()`` resolves ``org.apache.pulsar:pulsar-client`` into the same
cache as Kafka's jars and compiles ``java/PulsarJavaClient.java`` (a small driver that
produces and consumes); ``run_java_client()`` runs that driver.
"""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path

from dedup_broker.devservers.distribution import cache_root, ensure_resolved, find_java
from dedup_broker.errors import DevServerError

PULSAR_CLIENT_VERSION = "4.0.7"
DRIVER_CLASS = "PulsarJavaClient"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dedup-broker.devservers</groupId>
  <artifactId>pulsar-java-client</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.pulsar</groupId>
      <artifactId>pulsar-client</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>2.0.17</version>
    </dependency>
  </dependencies>
</project>
"""


def ensure_java_client(version: str = PULSAR_CLIENT_VERSION) -> Path:
    """The cache directory holding the client's jars in ``libs/`` and the compiled driver."""
    home = ensure_resolved(
        cache_root() / f"pulsar-java-client-{version}",
        _POM.format(version=version).encode(),
        f"the Pulsar Java client {version}",
        "pulsar-client-",
    )
    source = resources.files(__package__).joinpath("java", f"{DRIVER_CLASS}.java").read_bytes()
    classes = home / "classes"
    source_path = home / f"{DRIVER_CLASS}.java"
    if not (classes / f"{DRIVER_CLASS}.class").is_file() or (
        not source_path.is_file() or source_path.read_bytes() != source
    ):
        source_path.write_bytes(source)
        javac = Path(find_java()).with_name("javac")
        result = subprocess.run(
            [str(javac), "-d", str(classes), "-cp", f"{home / 'libs'}/*", str(source_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise DevServerError(f"javac failed to compile {source_path}:\n{result.stderr}")
    return home


def run_java_client(
    *args: str, timeout: float = 180.0, version: str = PULSAR_CLIENT_VERSION
) -> subprocess.CompletedProcess[str]:
    """Runs the driver (``produce ...`` / ``consume ...``); output is returned, not checked."""
    home = ensure_java_client(version)
    classpath = f"{home / 'classes'}:{home / 'libs'}/*"
    return subprocess.run(
        [
            find_java(),
            "-Xmx256m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            classpath,
            DRIVER_CLASS,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
