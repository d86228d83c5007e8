"""A single-node Apache Kafka (KRaft, broker and controller in one JVM) run from the jars.

For machines without a Docker engine. One ``NativeKafka`` object owns its ports and data
directory for its whole life, so it can be stopped (or killed) and started again on the
same address and the same data, as outage tests need.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from dedup_broker.devservers import distribution, process
from dedup_broker.devservers.native import NativeServer
from dedup_broker.errors import DevServerError

LOG4J2_PROPERTIES = """\
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
"""

KAFKA_MAIN = "kafka.Kafka"
JVM_OPTIONS = ("-XX:+UseG1GC", "-XX:G1HeapRegionSize=16M")
"""Of the G1 arguments Kafka's documentation calls typical, the region size matters most
here: with a small heap G1's regions are 1 MiB, and every object of half a region or more
(a produce request carrying a ledger's batches of several hundred KiB) is allocated
"humongous", straight into the old generation, which starts concurrent marking cycles
over and over (`git show 6305f93:docs/benchmarks.md`, "Kafka's garbage collector behind
the broker")."""
STORAGE_TOOL = "kafka.tools.StorageTool"
TOOL_JVM_OPTIONS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""A tool that runs for a second or two: the C1 compiler alone, the simplest collector
(C2's compiles would cost more CPU than they ever save: half the tool's 5 s of CPU)."""

_log = logging.getLogger(__name__)


def server_properties(
    port: int,
    controller_port: int,
    log_dir: Path,
    extra: Mapping[str, str] | None = None,
    *,
    node_id: int = 1,
    quorum_voters: str | None = None,
) -> dict[str, str]:
    """The broker configuration of a development node: alone by default, or one of the
    ``quorum_voters`` (``id@host:port,...``) of a cluster (``kafka_cluster.py``)."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum_voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Brokers of test clusters use short group sessions (kill -9, restart, repeat).
        "group.min.session.timeout.ms": "1000",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "log.retention.check.interval.ms": "5000",
        # After a SIGKILL the restarted node waits out its previous incarnation's broker
        # session before it serves; Kafka's 9 s default makes every crash test slower.
        "broker.session.timeout.ms": "5000",
        "broker.heartbeat.interval.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
    }
    props.update(extra or {})
    return props


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""What every SASL listener of the development Kafka accepts, each for every user."""

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


def _with_listener(
    props: dict[str, str], protocol: str, port: int, settings: Mapping[str, str]
) -> dict[str, str]:
    """``props`` with a client listener named after its ``protocol`` on ``port``;
    ``settings`` are that listener's own (``listener.name.<protocol>.`` + key)."""
    listener = f"{protocol}://127.0.0.1:{port}"
    prefix = f"listener.name.{protocol.lower()}."
    return {
        **props,
        "listeners": f"{props['listeners']},{listener}",
        "advertised.listeners": f"{props['advertised.listeners']},{listener}",
        "listener.security.protocol.map": (
            f"{props['listener.security.protocol.map']},{protocol}:{protocol}"
        ),
        **{prefix + key: value for key, value in settings.items()},
    }


def _tls_settings(keystore: Path) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.client.auth": "none",
    }


def sasl_listener(
    props: dict[str, str],
    sasl_port: int,
    users: Mapping[str, str],
    keystore: Path | None = None,
) -> dict[str, str]:
    """``props`` with a client listener on ``sasl_port`` that requires SASL: PLAIN or
    SCRAM-SHA-256/512 with these users (name -> password; SCRAM credentials are created
    when the storage is formatted). SASL_PLAINTEXT, or SASL_SSL with a ``keystore`` (as
    in ``ssl_listener``). The PLAINTEXT listener stays for the node's own traffic."""
    accounts = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    settings = {
        "plain.sasl.jaas.config": f"{PLAIN_LOGIN} {accounts};",
        "scram-sha-256.sasl.jaas.config": SCRAM_LOGIN,
        "scram-sha-512.sasl.jaas.config": SCRAM_LOGIN,
    }
    if keystore is not None:
        settings.update(_tls_settings(keystore))
    protocol = "SASL_PLAINTEXT" if keystore is None else "SASL_SSL"
    with_listener = _with_listener(props, protocol, sasl_port, settings)
    with_listener["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
    return with_listener


def ssl_listener(props: dict[str, str], ssl_port: int, keystore: Path) -> dict[str, str]:
    """``props`` with a client listener on ``ssl_port`` over TLS; ``keystore`` is one PEM
    file holding the server's private key (unencrypted PKCS#8) and its certificate chain."""
    return _with_listener(props, "SSL", ssl_port, _tls_settings(keystore))


def scram_arguments(users: Mapping[str, str]) -> list[str]:
    """The storage tool's ``--add-scram`` arguments: every user, every SCRAM mechanism."""
    arguments: list[str] = []
    for name, password in users.items():
        if re.search(r'[\s,=\[\]"]', name + password):
            raise DevServerError(
                f"SASL user {name!r}: names and passwords of the development Kafka "
                "cannot hold spaces, commas, '=', brackets or quotes"
            )
        for mechanism in SASL_MECHANISMS[1:]:
            arguments += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return arguments


class NativeKafka(NativeServer):
    """One Kafka JVM on 127.0.0.1 with fixed ports and a data directory it keeps.

    ``data_dir`` defaults to a fresh temporary directory, removed by ``close()``; a given
    directory is kept. Ports default to free ones picked once, at construction.
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        version: str = distribution.KAFKA_VERSION,
        heap: str = "512m",
        startup_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        detached: bool = False,
        extra_properties: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
        ssl_keystore: Path | None = None,
        node_id: int = 1,
        quorum_voters: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        self._init_native("kafka", data_dir, startup_timeout, stop_timeout, detached)
        self.node_id = node_id
        self.quorum_voters = quorum_voters
        """Every controller of the cluster this node belongs to (none: a cluster of one)."""
        self.cluster_id = cluster_id
        """The id the storage is formatted with; the nodes of one cluster share it."""
        if port is None or controller_port is None:
            picked = process.free_ports(2)
            port = picked[0] if port is None else port
            controller_port = picked[1] if controller_port is None else controller_port
        if port == controller_port:
            raise DevServerError(f"Kafka and its controller cannot share port {port}")
        self.port = port
        self.controller_port = controller_port
        self.version = version
        self.heap = heap
        self.extra_properties = dict(extra_properties or {})
        self.sasl_users = dict(sasl_users or {})
        """Users (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) of a SASL_PLAINTEXT listener on
        ``sasl_port`` (none: no listener)."""
        self.ssl_keystore = ssl_keystore
        """Key and certificate (PEM) of an SSL listener on ``ssl_port`` (none: no listener)."""
        self.sasl_port, self.ssl_port, self.sasl_ssl_port = _listener_ports(
            bool(self.sasl_users), ssl_keystore is not None
        )
        """With both ``sasl_users`` and ``ssl_keystore``, ``sasl_ssl_port`` is a third
        listener: SASL_SSL, the same users over TLS."""

    # --- addresses and files --------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listener (when ``sasl_users`` were given)."""
        if self.sasl_port is None:
            raise DevServerError("this Kafka has no SASL listener (no sasl_users)")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap_servers(self) -> str:
        """The SSL listener (when ``ssl_keystore`` was given)."""
        if self.ssl_port is None:
            raise DevServerError("this Kafka has no SSL listener (no ssl_keystore)")
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL listener (when both ``sasl_users`` and ``ssl_keystore`` were given)."""
        if self.sasl_ssl_port is None:
            raise DevServerError(
                "this Kafka has no SASL_SSL listener (needs sasl_users and ssl_keystore)"
            )
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def log_dir(self) -> Path:
        """Kafka's ``log.dirs``: the topic data that survives a restart."""
        return self.data_dir / "data"

    @property
    def log_path(self) -> Path:
        """The JVM's console output (appended across restarts)."""
        return self.data_dir / "kafka.log"

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        """Start the JVM (formatting storage on first use) and wait until it serves."""
        if self.running:
            return
        extra = [p for p in (self.sasl_port, self.ssl_port, self.sasl_ssl_port) if p]
        ports = [self.port, self.controller_port, *extra]
        process.ensure_ports_free(ports, "Kafka")
        home = distribution.ensure_kafka(self.version)
        java = distribution.find_java()
        self._write_config()
        if not (self.log_dir / "meta.properties").exists():
            self._format(java, home)
        argv = [
            java,
            f"-Xmx{self.heap}",
            *JVM_OPTIONS,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            str(home / "libs" / "*"),
            KAFKA_MAIN,
            str(self.data_dir / "server.properties"),
        ]
        started = time.monotonic()
        self._popen = process.spawn(
            argv, cwd=self.data_dir, log_path=self.log_path, detached=self.detached
        )
        if not self.detached:
            process.track(self)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        _log.info(
            "Kafka %s up at %s (pid %d) in %.1f s",
            self.version,
            self.bootstrap_servers,
            self._popen.pid,
            time.monotonic() - started,
        )

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"NativeKafka({self.bootstrap_servers}, {self.data_dir}, {state})"

    # --- internals ------------------------------------------------------------------
    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = server_properties(
            self.port,
            self.controller_port,
            self.log_dir,
            self.extra_properties,
            node_id=self.node_id,
            quorum_voters=self.quorum_voters,
        )
        if self.sasl_port is not None:
            props = sasl_listener(props, self.sasl_port, self.sasl_users)
        if self.ssl_port is not None and self.ssl_keystore is not None:
            props = ssl_listener(props, self.ssl_port, self.ssl_keystore)
        if self.sasl_ssl_port is not None:
            props = sasl_listener(props, self.sasl_ssl_port, self.sasl_users, self.ssl_keystore)
        text = "".join(f"{key}={value}\n" for key, value in props.items())
        (self.data_dir / "server.properties").write_text(text)
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def _format(self, java: str, home: Path) -> None:
        base = [
            java,
            *TOOL_JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            str(home / "libs" / "*"),
            STORAGE_TOOL,
        ]
        cluster_id = self.cluster_id or random_cluster_id()
        self._run_tool(
            [
                *base,
                "format",
                "-t",
                cluster_id,
                "-c",
                str(self.data_dir / "server.properties"),
                *scram_arguments(self.sasl_users),
                "-g",
            ]
        )

    def _run_tool(self, argv: list[str]) -> str:
        return run_kafka_tool(argv, self.data_dir)

    def _wait_ready(self) -> None:
        self._wait_until(
            lambda: process.port_accepts(self.port) and _metadata_ready(self.bootstrap_servers),
            "Kafka",
            self.bootstrap_servers,
            poll_seconds=0.25,
        )


def random_cluster_id() -> str:
    """A new KRaft cluster id in the form Kafka's ``random-uuid`` prints: 16 random bytes,
    URL-safe base64 without padding, never starting with ``-`` (a command line would read
    it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def run_kafka_tool(argv: list[str], cwd: Path) -> str:
    """One of Kafka's command-line tools run to its end; its output, or DevServerError."""
    try:
        result = subprocess.run(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        raise DevServerError(f"Kafka's {argv[-1]} step took over 120 s") from None
    if result.returncode != 0:
        raise DevServerError(
            f"Kafka storage tool failed (exit {result.returncode}): "
            f"{' '.join(argv[-6:])}\n{result.stdout.decode(errors='replace')}"
            f"{result.stderr.decode(errors='replace')}"
        )
    return result.stdout.decode()


def _listener_ports(sasl: bool, ssl: bool) -> tuple[int | None, int | None, int | None]:
    """Free ports of the SASL_PLAINTEXT, SSL and SASL_SSL listeners that are wanted."""
    wanted = [sasl, ssl, sasl and ssl]
    picked = iter(process.free_ports(sum(wanted)))
    sasl_port, ssl_port, sasl_ssl_port = (next(picked) if want else None for want in wanted)
    return sasl_port, ssl_port, sasl_ssl_port


def _metadata_ready(bootstrap_servers: str) -> bool:
    """True once the broker answers a metadata request listing itself."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": bootstrap_servers, "socket.timeout.ms": 2000, "log_level": 3}
    )
    try:
        metadata = admin.list_topics(timeout=2)
    except Exception:
        return False
    return len(metadata.brokers) > 0
