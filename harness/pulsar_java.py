"""The official Pulsar Java client, resolved from Maven Central, for compatibility runs.

Most Pulsar applications use the Java client, so the test suite proves the broker against
it: ``ensure_java_client()`` resolves ``org.apache.pulsar:pulsar-client`` into the same
cache as Kafka's jars (with ``pulsar_tools``' Maven Central mirror settings) and compiles
``java/PulsarJavaClient.java``, a small driver that produces and consumes and prints one
JSON object per line. ``java_produce()`` and ``java_consume()`` run it and parse what it
printed; ``run_java_client()`` runs it with raw arguments.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dedup_broker.devservers.distribution import cache_root, ensure_resolved, find_java
from dedup_broker.errors import DevServerError
from harness.pulsar_tools import CENTRAL_MIRROR_SETTINGS, compile_driver

PULSAR_CLIENT_VERSION = "4.0.7"
DRIVER_CLASS = "PulsarJavaClient"

Batching = Literal["none", "default", "key"]

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
    """The cache directory holding the client's jars in ``libs/`` and the compiled driver
    in ``classes/``; both are kept, the driver compiled again only when its source changed."""
    home = ensure_resolved(
        cache_root() / f"pulsar-java-client-{version}",
        _POM.format(version=version).encode(),
        f"the Pulsar Java client {version}",
        "pulsar-client-",
        settings=CENTRAL_MIRROR_SETTINGS.encode(),
    )
    compile_driver(home, f"{DRIVER_CLASS}.java", DRIVER_CLASS)
    return home


def java_client_command(*args: str, version: str = PULSAR_CLIENT_VERSION) -> list[str]:
    """The command line that runs the driver with ``args`` (for a process of one's own)."""
    home = ensure_java_client(version)
    classpath = f"{home / 'classes'}:{home / 'libs'}/*"
    return [
        find_java(),
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath,
        DRIVER_CLASS,
        *args,
    ]


def run_java_client(
    *args: str, timeout: float = 180.0, version: str = PULSAR_CLIENT_VERSION
) -> subprocess.CompletedProcess[str]:
    """Runs the driver (``produce ...`` / ``consume ...``); output is returned, not checked."""
    return subprocess.run(
        java_client_command(*args, version=version),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def java_payload(index: int, size: int = 0) -> bytes:
    """The payload the driver sends as message ``index``: ``m-<index>``, or exactly
    ``size`` bytes starting with ``m-<index> `` followed by letters."""
    head = f"m-{index}".encode()
    if size <= len(head):
        return head
    body = bytearray(ord("a") + (index + i) % 26 for i in range(size))
    body[: len(head)] = head
    body[len(head)] = ord(" ")
    return bytes(body)


@dataclass(frozen=True)
class SentMessage:
    """One message the driver's producer sent, with the id the client reported for it:
    ``ledger:entry:partition``, ``-1:-1:...`` when the broker answered that it was a
    duplicate; a chunked message's is ``<first chunk's id>;<last chunk's id>``."""

    sequence_id: int
    message_id: str

    @property
    def duplicate(self) -> bool:
        """The broker stored the message (its last chunk) before: nothing new was stored."""
        return self.message_id.rsplit(";", 1)[-1].startswith("-1:-1")

    @property
    def chunk_entries(self) -> tuple[int, int] | None:
        """A chunked message's first and last chunk's entry ids (-1: not stored)."""
        if ";" not in self.message_id:
            return None
        first, last = self.message_id.split(";")
        return int(first.split(":")[1]), int(last.split(":")[1])


@dataclass(frozen=True)
class Produced:
    last_sequence_id: int
    """What ``Producer.getLastSequenceId()`` said when the producer was created."""
    sent: list[SentMessage]
    resent: list[SentMessage]


@dataclass(frozen=True)
class ReceivedMessage:
    key: str | None
    size: int
    sha256: str
    value: str | None
    """The payload as text when it is at most 256 bytes long."""
    sequence_id: int
    producer_name: str
    message_id: str


@dataclass(frozen=True)
class Consumed:
    messages: list[ReceivedMessage]
    timed_out: bool
    """True when a receive waited ``timeout_ms`` for nothing before ``count`` arrived."""
    end_of_topic: bool = False
    """The consumer heard the topic was terminated and read to its end
    (``hasReachedEndOfTopic()``, as it stood when a receive timed out)."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def driver_events(
    result: subprocess.CompletedProcess[str], what: str, args: tuple[str, ...]
) -> list[dict[str, Any]]:
    """What a client driver printed, one dict a line; raises DevServerError unless it
    exited 0 and ended with ``done``."""
    try:
        events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    except json.JSONDecodeError as exc:
        raise DevServerError(f"the {what} printed a bad line: {exc}") from exc
    if result.returncode != 0 or not events or events[-1] != {"event": "done"}:
        raise DevServerError(
            f"the {what} {' '.join(args[:3])} failed (exit {result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )
    return events


def received_messages(events: list[dict[str, Any]]) -> list[ReceivedMessage]:
    """The ``received`` events a driver's consumer printed."""
    return [
        ReceivedMessage(
            key=e["key"],
            size=int(e["size"]),
            sha256=str(e["sha256"]),
            value=e.get("value"),
            sequence_id=int(e["sequenceId"]),
            producer_name=str(e["producerName"]),
            message_id=str(e["messageId"]),
        )
        for e in events
        if e["event"] == "received"
    ]


def _events(*args: str, timeout: float) -> list[dict[str, Any]]:
    return driver_events(run_java_client(*args, timeout=timeout), "Java client", args)


@dataclass(frozen=True)
class ClientTls:
    """A client's TLS and token options (for a ``pulsar+ssl://`` or ``https://`` URL), as
    the Java transactions driver (``PulsarTxnClient``) takes them."""

    trust_certs: Path | str | None = None
    allow_insecure: bool = False
    validate_hostname: bool = False
    token: str | None = None

    def args(self) -> list[str]:
        """As the driver takes them (``key=value`` arguments)."""
        args = [] if self.trust_certs is None else [f"tlsTrustCerts={self.trust_certs}"]
        args += ["tlsAllowInsecure=true"] if self.allow_insecure else []
        args += ["tlsValidateHostname=true"] if self.validate_hostname else []
        return args + ([] if self.token is None else [f"token={self.token}"])


def java_produce(
    service_url: str,
    topic: str,
    count: int,
    *,
    name: str | None = None,
    batching: Batching = "none",
    chunking: bool = False,
    size: int = 0,
    keys: int = 0,
    first: int = 0,
    resend: tuple[int, int] | None = None,
    timeout: float = 180.0,
) -> Produced:
    """Sends ``java_payload(i, size)`` with sequence id ``i`` for ``i`` in
    ``first..first+count-1`` (key ``k<i % keys>`` when ``keys``), then ``resend`` (first,
    last: inclusive) again from the same producer; raises DevServerError when the driver
    fails."""
    args = ["produce", service_url, topic, str(count), f"batching={batching}"]
    args += [f"size={size}", f"keys={keys}", f"first={first}", f"chunking={str(chunking).lower()}"]
    if name is not None:
        args.append(f"name={name}")
    if resend is not None:
        args.append(f"resend={resend[0]}-{resend[1]}")
    events = _events(*args, timeout=timeout)
    producer = [e for e in events if e["event"] == "producer"]
    if len(producer) != 1:
        raise DevServerError(f"the Java producer did not start: {events}")

    def sent(kind: str) -> list[SentMessage]:
        return [
            SentMessage(int(e["sequenceId"]), str(e["messageId"]))
            for e in events
            if e["event"] == kind
        ]

    return Produced(int(producer[0]["lastSequenceId"]), sent("sent"), sent("resent"))


def java_consume(
    service_url: str,
    topic: str,
    subscription: str,
    count: int,
    *,
    timeout_ms: int = 30_000,
    subscription_type: str = "Exclusive",
    timeout: float = 180.0,
) -> Consumed:
    """Receives up to ``count`` messages from the earliest position, acknowledging each;
    stops early when none arrives for ``timeout_ms``."""
    events = _events(
        "consume",
        service_url,
        topic,
        subscription,
        str(count),
        f"timeoutMs={timeout_ms}",
        f"type={subscription_type}",
        timeout=timeout,
    )
    messages = received_messages(events)
    timeouts = [e for e in events if e["event"] == "timeout"]
    return Consumed(messages, bool(timeouts), any(e.get("endOfTopic") for e in timeouts))


def java_priority_shares(
    service_url: str,
    topic: str,
    subscription: str,
    count: int,
    priorities: tuple[int, ...],
    *,
    queue: int = 10,
    timeout: float = 180.0,
) -> dict[int, int]:
    """Shared consumers of ``priorities`` (subscribed in that order, each with
    ``receiverQueueSize`` ``queue``), then ``count`` messages: how many each priority
    level's consumer had been sent (up to its queue) once dispatch settled."""
    events = _events(
        "priority",
        service_url,
        topic,
        subscription,
        str(count),
        f"priorities={','.join(str(p) for p in priorities)}",
        f"queue={queue}",
        timeout=timeout,
    )
    return {int(e["priority"]): int(e["received"]) for e in events if e["event"] == "share"}


@dataclass(frozen=True)
class FailoverShare:
    """What one Failover consumer of the driver's ``failover`` mode had in one round."""

    round: int
    consumer: int
    """Its index in the priorities given (its name is ``c<index>``)."""
    priority: int
    active: tuple[int, ...]
    """The partitions it was last told it is active for."""
    received: tuple[int, ...]
    """The partitions it received messages of."""


def java_failover_shares(
    service_url: str,
    topic: str,
    subscription: str,
    count: int,
    priorities: tuple[int, ...],
    *,
    settle_ms: int = 3000,
    timeout: float = 180.0,
) -> list[FailoverShare]:
    """Failover consumers of ``priorities`` on the partitioned ``topic``, then ``count``
    messages round-robin over its partitions: each consumer's share (round 1), and again
    once the consumers of the best level left (round 2)."""
    events = _events(
        "failover",
        service_url,
        topic,
        subscription,
        str(count),
        f"priorities={','.join(str(p) for p in priorities)}",
        f"settleMs={settle_ms}",
        timeout=timeout,
    )
    return [
        FailoverShare(
            int(e["round"]),
            int(e["consumer"]),
            int(e["priority"]),
            tuple(int(p) for p in e["active"]),
            tuple(int(p) for p in e["received"]),
        )
        for e in events
        if e["event"] == "failover"
    ]
