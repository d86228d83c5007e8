"""The official Java client's transactions, driven one command at a time.

``JavaTransactions`` runs ``java/PulsarTxnClient.java`` (built with
``enableTransaction(true)``) and speaks its line protocol, so a test can look at what
readers see between a transactional send and its commit or abort."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import tempfile
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from dedup_broker.devservers.distribution import find_java
from dedup_broker.errors import DevServerError
from harness.pulsar_java import ClientTls, ensure_java_client
from harness.pulsar_tools import compile_driver

DRIVER = "PulsarTxnClient"


class JavaTransactionError(Exception):
    """The client answered a command with an error (its message says which)."""


class JavaTransactions:
    def __init__(
        self, service_url: str, start_timeout: float = 120.0, tls: ClientTls | None = None
    ) -> None:
        """``tls``: the TLS and token options for a ``pulsar+ssl://`` or ``https://`` URL."""
        home = ensure_java_client()
        compile_driver(home, f"{DRIVER}.java", DRIVER)
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by close()
        self.process = subprocess.Popen(
            [
                find_java(),
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                f"{home / 'classes'}:{home / 'libs'}/*",
                DRIVER,
                service_url,
                *(tls.args() if tls is not None else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._expect("ready", start_timeout)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self._lines.put(line)
        self._lines.put(None)

    def _expect(self, event: str, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise DevServerError(f"the Java client said nothing for {timeout} s") from None
        if line is None:
            self._stderr.seek(0)
            raise DevServerError(f"the Java client exited:\n{self._stderr.read()[-5000:]}")
        answer: dict[str, Any] = json.loads(line)
        if answer["event"] == "error":
            raise JavaTransactionError(answer["error"])
        if answer["event"] != event:
            raise DevServerError(f"expected {event!r} from the Java client, got {answer}")
        return answer

    def _ask(self, command: str, event: str, timeout: float = 90.0) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._expect(event, timeout)

    def new(self, timeout_seconds: int = 60) -> tuple[int, int]:
        """A new transaction (the current one from now on): its (most, least) bits."""
        answer = self._ask(f"new {timeout_seconds}", "txn")
        return int(answer["most"]), int(answer["least"])

    def send(self, topic: str, payload: str, sequence_id: int | None = None) -> str:
        """``payload`` (one word) in the current transaction, with ``sequence_id`` when
        given; the message id (``-1:-1:...`` when the broker found it a duplicate)."""
        command = f"send {topic} {payload}" + (f" {sequence_id}" if sequence_id is not None else "")
        return str(self._ask(command, "sent")["messageId"])

    def send_plain(self, topic: str, payload: str) -> str:
        """``payload`` outside any transaction."""
        return str(self._ask(f"plain {topic} {payload}", "sent")["messageId"])

    def consume(
        self, topic: str, subscription: str, count: int, cumulative: bool = False
    ) -> list[str]:
        """``count`` messages, each acknowledged in the current transaction (Shared), or
        the last one cumulatively (``cumulative``: a Failover subscription)."""
        assert self.process.stdin is not None
        verb = "consume-cumulative" if cumulative else "consume"
        self.process.stdin.write(f"{verb} {topic} {subscription} {count}\n")
        self.process.stdin.flush()
        return [str(self._expect("received", 90.0)["value"]) for _ in range(count)]

    def start_pipeline(self, source: str, sink: str, batch: int) -> None:
        """Consume-process-produce from ``source`` to ``sink`` in transactions of up to
        ``batch`` messages (each with a timeout of 10 s), in the background of the
        client, until ``source`` stays empty for 25 s (:meth:`wait_pipeline`)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"pipeline {source} {sink} {batch}\n")
        self.process.stdin.flush()

    def wait_pipeline(
        self, timeout: float, on_step: Callable[[int, int], None] | None = None
    ) -> tuple[int, int]:
        """Until the pipeline ends: (messages committed, steps failed) as it counted;
        ``on_step`` hears both totals after every step."""
        committed = failed = 0
        while True:
            line = self._lines.get(timeout=timeout)
            if line is None:
                raise DevServerError("the Java client exited during the pipeline")
            answer = json.loads(line)
            if answer["event"] == "pipelined":
                return committed, failed
            if "committed" in answer:
                committed += int(answer["committed"])
            else:
                failed += 1
            if on_step is not None:
                on_step(committed, failed)

    def commit(self) -> None:
        self._ask("commit", "ended")

    def abort(self) -> None:
        self._ask("abort", "ended")

    def kill(self) -> None:
        """kill -9: the client vanishes with its transaction open."""
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(DevServerError, JavaTransactionError, OSError):
                self._ask("quit", "done", timeout=30)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._stderr.close()

    def __enter__(self) -> JavaTransactions:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
