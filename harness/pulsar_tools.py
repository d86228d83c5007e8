"""Pulsar's official command-line tools, resolved from Maven Central: ``pulsar-admin``
(``pulsar-client-tools``) and ``pulsar-perf`` (``pulsar-testclient``).

Users administer and benchmark a Pulsar cluster with these, so the broker is checked
against them unmodified. Both exist on Maven Central at 4.0.6 only, and some of 4.0.6's own
Pulsar dependencies are missing there: importing ``pulsar-bom`` 4.0.7 in
``dependencyManagement`` resolves them, and a ``settings.xml`` mirroring every repository
to Maven Central avoids a repository a Pulsar POM names that cannot be reached.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dedup_broker.devservers.distribution import cache_root, ensure_resolved, find_java
from dedup_broker.devservers.fetch import locked
from dedup_broker.devservers.pieces import jar_classpath, java_compiler
from dedup_broker.errors import DevServerError

PULSAR_TOOLS_VERSION = "4.0.6"
PULSAR_BOM_VERSION = "4.0.7"
ADMIN_MAIN_CLASS = "org.apache.pulsar.admin.cli.PulsarAdminTool"
PERF_MAIN_CLASS = "org.apache.pulsar.testclient.PulsarPerfTestTool"
ADMIN_BATCH_SOURCE = "PulsarAdminBatch.java"
ADMIN_BATCH_CLASS = "org.apache.pulsar.admin.cli.PulsarAdminBatch"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dedup-broker.devservers</groupId>
  <artifactId>pulsar-tools</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.apache.pulsar</groupId>
        <artifactId>pulsar-bom</artifactId>
        <version>{bom}</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>org.apache.pulsar</groupId>
      <artifactId>pulsar-client-tools</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.pulsar</groupId>
      <artifactId>pulsar-testclient</artifactId>
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

CENTRAL_MIRROR_SETTINGS = """<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror>
      <id>central-for-all</id>
      <mirrorOf>*</mirrorOf>
      <url>https://repo.maven.apache.org/maven2</url>
    </mirror>
  </mirrors>
</settings>
"""


def ensure_pulsar_tools(version: str = PULSAR_TOOLS_VERSION) -> Path:
    """The cache directory holding ``pulsar-admin``'s and ``pulsar-perf``'s jars in ``libs/``."""
    return ensure_resolved(
        cache_root() / f"pulsar-tools-{version}",
        _POM.format(version=version, bom=PULSAR_BOM_VERSION).encode(),
        f"the Pulsar command-line tools {version}",
        "pulsar-client-tools-",
        settings=CENTRAL_MIRROR_SETTINGS.encode(),
    )


def compile_driver(home: Path, source_name: str, class_name: str) -> Path:
    """``home/classes`` with ``java/<source_name>`` (this package's) compiled against the
    jars in ``home/libs``. ``home/<source_name>`` is the source last compiled: it is
    written only after javac succeeded, so a changed or half-compiled driver is compiled
    again."""
    source = resources.files(__package__).joinpath("java", source_name).read_bytes()
    classes = home / "classes"
    stamp = home / source_name
    compiled = classes.joinpath(*class_name.split(".")).with_suffix(".class")
    if compiled.is_file() and stamp.is_file() and stamp.read_bytes() == source:
        return classes
    # Test processes running side by side compile one at a time, never over each other.
    with locked(home / f"{source_name}.lock"):
        if compiled.is_file() and stamp.is_file() and stamp.read_bytes() == source:
            return classes
        _compile(home, source_name, source)
    return classes


def _compile(home: Path, source_name: str, source: bytes) -> None:
    classes = home / "classes"
    source_path = home / "src" / source_name
    source_path.parent.mkdir(parents=True, exist_ok=True)
    source_path.write_bytes(source)
    compiler = java_compiler()
    result = subprocess.run(
        [*compiler, "-d", str(classes), "-cp", jar_classpath(home / "libs"), str(source_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise DevServerError(
            f"{'javac' if len(compiler) == 1 else 'the Eclipse compiler'} failed to compile "
            f"{source_path}:\n{result.stdout}{result.stderr}"
        )
    (home / source_name).write_bytes(source)


def _compiled_batch_driver(home: Path) -> Path:
    """``home/classes`` with the driver that runs several pulsar-admin commands per JVM."""
    return compile_driver(home, ADMIN_BATCH_SOURCE, ADMIN_BATCH_CLASS)


def _run(
    main_class: str,
    args: Sequence[str],
    timeout: float,
    version: str,
    with_classes: bool = False,
    heap: str = "256m",
    log_level: str = "warn",
    full_jit: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Runs ``main_class``; short-lived tools start faster with the C1 compiler only, a
    throughput run needs ``full_jit`` (C2) or the tool limits what it measures."""
    home = ensure_pulsar_tools(version)
    classpath = f"{home / 'libs'}/*"
    if with_classes:
        classpath = f"{_compiled_batch_driver(home)}:{classpath}"
    return subprocess.run(
        [
            find_java(),
            f"-Xmx{heap}",
            *(() if full_jit else ("-XX:TieredStopAtLevel=1",)),
            f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
            # Each line starts with the milliseconds since the JVM started.
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            classpath,
            main_class,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def write_client_conf(path: Path, service_url: str, web_service_url: str) -> Path:
    """A ``client.conf`` as both tools read it (their first argument)."""
    path.write_text(f"brokerServiceUrl={service_url}\nwebServiceUrl={web_service_url}\n")
    return path


def run_pulsar_admin(
    client_conf: Path,
    *args: str,
    timeout: float = 120.0,
    version: str = PULSAR_TOOLS_VERSION,
) -> subprocess.CompletedProcess[str]:
    """``pulsar-admin ARGS`` with ``client_conf``; output is returned, not checked."""
    return _run(ADMIN_MAIN_CLASS, [str(client_conf), *args], timeout, version)


def run_pulsar_perf(
    client_conf: Path,
    *args: str,
    timeout: float = 180.0,
    version: str = PULSAR_TOOLS_VERSION,
    full_jit: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``pulsar-perf produce|consume ARGS`` with ``client_conf``; output is returned.

    Its latency histograms take several hundred MB of heap at start-up. Benchmarks pass
    ``full_jit``: the C1-only default (quick to start) caps the tool's own throughput."""
    return _run(
        PERF_MAIN_CLASS,
        [str(client_conf), *args],
        timeout,
        version,
        heap="1g",
        log_level="info",
        full_jit=full_jit,
    )


@dataclass(frozen=True)
class AdminOutcome:
    """One pulsar-admin command of a batch: its arguments, exit code and output."""

    args: tuple[str, ...]
    exit_code: int
    output: str


def run_pulsar_admin_batch(
    client_conf: Path,
    commands: Sequence[Sequence[str]],
    timeout: float = 240.0,
    version: str = PULSAR_TOOLS_VERSION,
) -> list[AdminOutcome]:
    """Runs ``commands`` (each one pulsar-admin command line, as arguments) in one JVM,
    in order; each command's exit code is the one pulsar-admin would have exited with."""
    command_file = client_conf.with_name(client_conf.name + ".commands")
    for args in commands:
        if any("\t" in arg or "\n" in arg for arg in args):
            raise ValueError(f"pulsar-admin arguments may not hold tabs or newlines: {args}")
    command_file.write_text("".join("\t".join(args) + "\n" for args in commands))
    result = _run(ADMIN_BATCH_CLASS, [str(client_conf), str(command_file)], timeout, version, True)
    outcomes = _split_batch_output(result.stdout, commands)
    if len(outcomes) != len(commands):
        raise DevServerError(
            f"pulsar-admin batch ran {len(outcomes)} of {len(commands)} commands "
            f"(exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return outcomes


def _split_batch_output(stdout: str, commands: Sequence[Sequence[str]]) -> list[AdminOutcome]:
    outcomes: list[AdminOutcome] = []
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("=== begin "):
            current = []
        elif line.startswith("=== exit ") and current is not None:
            index, code = (int(part) for part in line.split()[2:4])
            output = "\n".join(x for x in current if not x.startswith("Exit code is "))
            outcomes.append(AdminOutcome(tuple(commands[index]), code, output))
            current = None
        elif current is not None:
            current.append(line)
    return outcomes
