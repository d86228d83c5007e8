"""The official Pulsar Go client (``github.com/apache/pulsar-client-go``), for
compatibility runs.

Go services talk to Pulsar through this client, which implements the protocol on its own
(its batching, lookups, TLS and send receipts are not the Java client's), so the suite
proves the broker against it too. ``ensure_go_client()`` builds ``go/pulsar_go_client``,
a small driver that produces and consumes and prints one JSON object per line, with
modules from the Go module proxy; ``go_produce()`` and ``go_consume()`` run it and return
what ``harness.pulsar_java`` returns; ``go_transactions()`` runs its transactions (a
commit, an abort, acknowledgements in a transaction); ``go_terminate_while_sending()``
terminates a topic under a sending producer; ``run_go_client()`` runs it with raw
arguments.

What the driver prints differs from the Java driver's in four ways, all from the Go
client's API: ``Produced.last_sequence_id`` is always -1 (``LastSequenceID()`` ignores
the broker's answer to the new producer and counts only this producer's receipts); a
message id is ``ledger:entry:partition:batchIndex`` (batch index 0 for a
message sent alone; a chunked message's is ``<first chunk>;<last chunk>`` with three
fields each, as the Java client prints it); a received message's ``sequence_id`` is
always -1 (the client does not expose it); and an empty key reads as no key.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dedup_broker.devservers import fetch, pieces
from dedup_broker.devservers.distribution import cache_root
from dedup_broker.errors import DevServerError
from harness.pulsar_java import (
    Batching,
    Consumed,
    Produced,
    SentMessage,
    driver_events,
    received_messages,
)

GoSchema = Literal["none", "bytes"]
"""The schema the driver's producer or consumer declares (``bytes``: ``BytesSchema``)."""

SOURCE_DIR = Path(__file__).parent / "go" / "pulsar_go_client"
SOURCES = ("go.mod", "go.sum", "main.go")
BINARY_PREFIX = "pulsar-go-client-"


def _source_digest() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build_environment() -> dict[str, str]:
    """``GOTOOLCHAIN=auto``: a machine's Go at least as new as go.mod's builds with
    itself, an older one (Debian 12's 1.19) fetches the version go.mod names from the Go
    module proxy; ``-mod=readonly``: the build uses the committed go.sum and never
    rewrites the sources."""
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "auto"
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    return env


def ensure_go_client() -> Path:
    """The driver's binary in the cache, built again only when its sources changed (their
    hash is in the name); older builds are removed. One process builds it at a time (a
    build takes minutes on a fresh machine; test workers asking at once wait for it)."""
    folder = cache_root() / "pulsar-go-client"
    binary = folder / f"{BINARY_PREFIX}{_source_digest()}"
    if binary.is_file():
        return binary
    with fetch.locked(folder / "build.lock"):
        if not binary.is_file():
            _build(binary)
    return binary


def _build(binary: Path) -> None:
    folder = binary.parent
    go = pieces.go()
    if go is None:
        raise DevServerError(
            "the Pulsar Go client needs the go command, not found "
            "(Debian: apt-get install -y golang-go)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{binary.name}.{os.getpid()}"
    try:
        result = subprocess.run(
            [go, "build", "-o", str(partial), "."],
            cwd=SOURCE_DIR,
            env=_build_environment(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        partial.unlink(missing_ok=True)
        raise DevServerError(f"building the Pulsar Go client failed: {exc}") from exc
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise DevServerError(
            f"building the Pulsar Go client failed (go build exit {result.returncode}):\n"
            f"{result.stdout[-2000:]}{result.stderr[-5000:]}"
        )
    os.replace(partial, binary)
    for old in folder.glob(f"{BINARY_PREFIX}*"):
        if old != binary:
            old.unlink(missing_ok=True)


def run_go_client(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Runs the driver (``produce ...`` / ``consume ...``); output is returned, not checked."""
    return subprocess.run(
        [str(ensure_go_client()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def go_events(*args: str, timeout: float = 180.0) -> list[dict[str, Any]]:
    """What the driver printed, one dict a line; raises DevServerError unless it exited
    0 and ended with ``done``."""
    return driver_events(run_go_client(*args, timeout=timeout), "Go client", args)


def _tls_args(
    tls_trust_certs: Path | str | None,
    tls_allow_insecure: bool,
    tls_validate_hostname: bool,
    token: str | None,
    listener_name: str | None = None,
) -> list[str]:
    args = [] if tls_trust_certs is None else [f"tlsTrustCerts={tls_trust_certs}"]
    args += ["tlsAllowInsecure=true"] if tls_allow_insecure else []
    args += ["tlsValidateHostname=true"] if tls_validate_hostname else []
    args += [] if listener_name is None else [f"listenerName={listener_name}"]
    return args + ([] if token is None else [f"token={token}"])


def go_produce(
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
    send_timeout_ms: int = 0,
    max_messages: int = 1000,
    delay_ms: int = 50,
    schema: GoSchema = "none",
    tls_trust_certs: Path | str | None = None,
    tls_allow_insecure: bool = False,
    tls_validate_hostname: bool = False,
    token: str | None = None,
    listener_name: str | None = None,
    timeout: float = 180.0,
) -> Produced:
    """Sends ``java_payload(i, size)`` with sequence id ``i`` for ``i`` in
    ``first..first+count-1`` (key ``k<i % keys>`` when ``keys``), all asynchronously then
    flushed; raises DevServerError when the driver fails or any send failed (``go_events``
    shows failures one by one). ``resent`` is always empty. ``schema="bytes"``: the
    producer declares the Go client's ``BytesSchema`` and sends values."""
    args = ["produce", service_url, topic, str(count), f"batching={batching}"]
    args += [f"size={size}", f"keys={keys}", f"first={first}", f"chunking={str(chunking).lower()}"]
    args += [f"sendTimeoutMs={send_timeout_ms}", f"maxMessages={max_messages}"]
    args += [f"delayMs={delay_ms}", f"schema={schema}"]
    if name is not None:
        args.append(f"name={name}")
    args += _tls_args(
        tls_trust_certs, tls_allow_insecure, tls_validate_hostname, token, listener_name
    )
    events = go_events(*args, timeout=timeout)
    producer = [e for e in events if e["event"] == "producer"]
    failed = [e for e in events if e["event"] == "failed"]
    if len(producer) != 1 or failed:
        raise DevServerError(f"the Go producer failed: {producer + failed}")
    sent = [
        SentMessage(int(e["sequenceId"]), str(e["messageId"]))
        for e in events
        if e["event"] == "sent"
    ]
    return Produced(int(producer[0]["lastSequenceId"]), sent, [])


def go_consume(
    service_url: str,
    topic: str,
    subscription: str,
    count: int,
    *,
    timeout_ms: int = 30_000,
    subscription_type: str = "Exclusive",
    schema: GoSchema = "none",
    tls_trust_certs: Path | str | None = None,
    tls_allow_insecure: bool = False,
    tls_validate_hostname: bool = False,
    token: str | None = None,
    listener_name: str | None = None,
    timeout: float = 180.0,
) -> Consumed:
    """Receives up to ``count`` messages from the earliest position, acknowledging each;
    stops early when none arrives for ``timeout_ms``. ``schema="bytes"``: the consumer
    declares ``BytesSchema`` and each value is decoded with ``GetSchemaValue`` (the client
    asks the broker for the schema version the message carries; the driver fails if it
    cannot)."""
    events = go_events(
        "consume",
        service_url,
        topic,
        subscription,
        str(count),
        f"timeoutMs={timeout_ms}",
        f"type={subscription_type}",
        f"schema={schema}",
        *_tls_args(
            tls_trust_certs, tls_allow_insecure, tls_validate_hostname, token, listener_name
        ),
        timeout=timeout,
    )
    return Consumed(received_messages(events), any(e["event"] == "timeout" for e in events))


@dataclass(frozen=True)
class GoTransactions:
    """What the driver's ``txn`` command saw (values are the payloads as text)."""

    committed: list[str]
    """Sent in the transaction that was then committed (``c-<i>``), in order."""
    aborted: list[str]
    """Sent in the transaction that was then aborted (``a-<i>``)."""
    visible_before_commit: int
    """Messages the consumer received while both transactions were open."""
    received: list[str]
    """Received after the commit and the abort, each acknowledged in a third
    transaction that was committed."""
    redelivered: int
    """Messages delivered again to a new consumer of the subscription afterwards."""
    transaction_ids: list[tuple[int, int]]
    """(most, least) bits of the commit, abort and acknowledgement transactions."""


def go_transactions(
    service_url: str,
    topic: str,
    subscription: str,
    count: int,
    *,
    timeout_ms: int = 2000,
    tls_trust_certs: Path | str | None = None,
    tls_allow_insecure: bool = False,
    tls_validate_hostname: bool = False,
    token: str | None = None,
    listener_name: str | None = None,
    timeout: float = 180.0,
) -> GoTransactions:
    """The Go client's transactions on ``topic``: ``count`` messages committed, ``count``
    aborted, what a consumer receives acknowledged in a committed transaction, then
    what a new consumer gets again (``timeout_ms``: how long a receive waits for more).
    Raises DevServerError when any step fails."""
    events = go_events(
        "txn",
        service_url,
        topic,
        subscription,
        str(count),
        f"timeoutMs={timeout_ms}",
        *_tls_args(
            tls_trust_certs, tls_allow_insecure, tls_validate_hostname, token, listener_name
        ),
        timeout=timeout,
    )

    def sent(name: str) -> list[str]:
        return [str(e["value"]) for e in events if e["event"] == "sent" and e["txn"] == name]

    ended = [e["txn"] for e in events if e["event"] == "ended"]
    if ended != ["commit", "abort", "ack"]:
        raise DevServerError(f"the Go transactions ended as {ended}: {events}")
    return GoTransactions(
        committed=sent("commit"),
        aborted=sent("abort"),
        visible_before_commit=next(
            int(e["count"]) for e in events if e["event"] == "visibleBeforeCommit"
        ),
        received=[str(e["value"]) for e in events if e["event"] == "received"],
        redelivered=next(int(e["count"]) for e in events if e["event"] == "redelivered"),
        transaction_ids=[(int(e["most"]), int(e["least"])) for e in events if e["event"] == "txn"],
    )


@dataclass(frozen=True)
class GoTermination:
    """What the driver's ``terminate`` command saw."""

    status: int
    """The HTTP status of the termination."""
    error: str | None
    """The first send error after it (None: no send failed within the time allowed)."""
    topic_terminated: bool
    """That error is the client's ``ErrTopicTerminated``."""
    producer_closed: bool
    """That error is the client's ``ErrProducerClosed``."""
    after_ms: int
    """How long after the termination the send failed."""


def go_terminate_while_sending(
    service_url: str,
    topic: str,
    subscription: str,
    admin_url: str,
    *,
    send_timeout_ms: int = 2000,
    timeout_ms: int = 10_000,
    timeout: float = 120.0,
) -> GoTermination:
    """The Go client's own termination check: a consumer that never acknowledges, a
    producer sending one message at a time, the topic terminated through ``admin_url``
    (without credentials) once one message was stored; what the first failed send said."""
    events = go_events(
        "terminate",
        service_url,
        topic,
        subscription,
        admin_url,
        f"sendTimeoutMs={send_timeout_ms}",
        f"timeoutMs={timeout_ms}",
        timeout=timeout,
    )
    status = next(int(e["status"]) for e in events if e["event"] == "terminated")
    failed = [e for e in events if e["event"] == "sendFailed"]
    if not failed:
        return GoTermination(status, None, False, False, 0)
    first = failed[0]
    return GoTermination(
        status,
        str(first["error"]),
        bool(first["topicTerminated"]),
        bool(first["producerClosed"]),
        int(first["afterMs"]),
    )
