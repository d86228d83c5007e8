"""A real Apache Pulsar standalone (broker, one bookie, RocksDB metadata in one JVM),
run from ``pulsar-broker``'s jars resolved from Maven Central.

It is the peer the publish benchmark compares the broker with: the same official
``pulsar-perf`` drives both, so any difference is the server's. Functions worker and
stream storage are off; everything binds 127.0.0.1 on free ports, and the process is
stopped by pid.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from dedup_broker.devservers import process
from dedup_broker.devservers.distribution import cache_root, ensure_resolved, find_java
from dedup_broker.devservers.native import NativeServer
from harness.pulsar_tools import CENTRAL_MIRROR_SETTINGS, PULSAR_BOM_VERSION

PULSAR_VERSION = PULSAR_BOM_VERSION
LOG4J_VERSION = "2.24.3"
STANDALONE_MAIN = "org.apache.pulsar.PulsarStandaloneStarter"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dedup-broker.devservers</groupId>
  <artifactId>pulsar-standalone</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.pulsar</groupId>
      <artifactId>pulsar-broker</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

LOG4J2_PROPERTIES = """\
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
"""

_log = logging.getLogger(__name__)


def ensure_pulsar(version: str = PULSAR_VERSION) -> Path:
    """The cache directory holding ``pulsar-broker``'s runtime jars in ``libs/``."""
    return ensure_resolved(
        cache_root() / f"pulsar-standalone-{version}",
        _POM.format(version=version, log4j=LOG4J_VERSION).encode(),
        f"the Pulsar standalone {version}",
        "pulsar-broker-",
        settings=CENTRAL_MIRROR_SETTINGS.encode(),
    )


def standalone_conf(
    service_port: int, web_port: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A one-node standalone's settings: loopback only, one copy of each entry."""
    conf = {
        "clusterName": "standalone",
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        "brokerServicePort": str(service_port),
        "webServicePort": str(web_port),
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
        "functionsWorkerEnabled": "false",
        "allowAutoTopicCreation": "true",
        "allowAutoTopicCreationType": "non-partitioned",
        "brokerDeduplicationEnabled": "false",
        "authenticationEnabled": "false",
        "authorizationEnabled": "false",
        "loadBalancerEnabled": "false",
        "webSocketServiceEnabled": "false",
    }
    conf.update(extra or {})
    return conf


class PulsarStandalone(NativeServer):
    """One ``PulsarStandaloneStarter`` JVM on 127.0.0.1; data is wiped at every start.

    ``settings`` are extra broker settings (``standalone.conf`` keys), e.g.
    ``{"brokerDeduplicationEnabled": "true"}``.
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        settings: Mapping[str, str] | None = None,
        version: str = PULSAR_VERSION,
        heap: str = "1g",
        startup_timeout: float = 120.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self._init_native("pulsar", data_dir, startup_timeout, stop_timeout, detached=False)
        self.port, self.web_port, self.bookie_port = process.free_ports(3)
        self.settings = dict(settings or {})
        self.version = version
        self.heap = heap

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "standalone.log"

    def start(self) -> None:
        """Start the JVM and wait until the broker answers admin requests."""
        if self.running:
            return
        process.ensure_ports_free([self.port, self.web_port, self.bookie_port], "Pulsar")
        home = ensure_pulsar(self.version)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf_path = self.data_dir / "standalone.conf"
        conf = standalone_conf(self.port, self.web_port, self.settings)
        conf_path.write_text("".join(f"{key}={value}\n" for key, value in conf.items()))
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES)
        argv = [
            find_java(),
            f"-Xmx{self.heap}",
            "-XX:MaxDirectMemorySize=1g",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-Dpulsar.allocator.exit_on_oom=true",
            "-cp",
            f"{home / 'libs'}/*",
            STANDALONE_MAIN,
            "--config",
            str(conf_path),
            "--wipe-data",
            "-nfw",
            "-nss",
            "--bookkeeper-port",
            str(self.bookie_port),
            "--bookkeeper-dir",
            str(self.data_dir / "bookkeeper"),
            "--metadata-dir",
            str(self.data_dir / "metadata"),
        ]
        started = time.monotonic()
        self._popen = process.spawn(argv, cwd=self.data_dir, log_path=self.log_path, detached=False)
        process.track(self)
        try:
            self._wait_until(self._ready, "Pulsar standalone", self.service_url, 0.5)
        except BaseException:
            self.kill()
            raise
        _log.info(
            "Pulsar %s standalone up at %s (pid %d) in %.1f s",
            self.version,
            self.service_url,
            self._popen.pid,
            time.monotonic() - started,
        )

    def _ready(self) -> bool:
        if not process.port_accepts(self.port):
            return False
        try:
            with urllib.request.urlopen(
                f"{self.http_url}/admin/v2/namespaces/public/default", timeout=5
            ) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"PulsarStandalone({self.service_url}, {self.data_dir}, {state})"
