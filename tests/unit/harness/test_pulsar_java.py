"""The Java client driver's JSON lines are parsed into typed results; its payloads are
rebuilt byte for byte in Python."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from dedup_broker.errors import DevServerError
from harness import pulsar_java
from harness.pulsar_java import (
    ReceivedMessage,
    SentMessage,
    java_consume,
    java_payload,
    java_produce,
)


def fake_run(monkeypatch: pytest.MonkeyPatch, stdout: str, code: int = 0) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def run(*args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(list(args), code, stdout, "a stack trace")

    monkeypatch.setattr(pulsar_java, "run_java_client", run)
    return calls


def test_payloads_are_the_drivers() -> None:
    assert java_payload(7) == b"m-7"
    assert java_payload(7, 2) == b"m-7"
    big = java_payload(3, 40)
    assert len(big) == 40
    assert big[:4] == b"m-3 "
    assert big[4:8] == bytes(ord("a") + (3 + i) % 26 for i in range(4, 8))


def test_duplicates_and_chunk_entries_from_message_ids() -> None:
    assert not SentMessage(0, "5:0:-1").duplicate
    assert SentMessage(0, "-1:-1:-1").duplicate
    assert SentMessage(0, "5:0:-1").chunk_entries is None
    chunked = SentMessage(1, "5:3:-1;5:5:-1")
    assert (chunked.duplicate, chunked.chunk_entries) == (False, (3, 5))
    resent = SentMessage(1, "5:15:-1;-1:-1:-1")
    assert (resent.duplicate, resent.chunk_entries) == (True, (15, -1))


def test_produce_events_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_run(
        monkeypatch,
        "\n".join(
            [
                "SLF4J(W): noise",
                '{"event":"producer","lastSequenceId":-1}',
                '{"event":"sent","sequenceId":0,"messageId":"5:0:-1"}',
                '{"event":"sent","sequenceId":1,"messageId":"5:1:-1"}',
                '{"event":"resent","sequenceId":1,"messageId":"-1:-1:-1"}',
                '{"event":"done"}',
            ]
        ),
    )
    produced = java_produce("pulsar://h:1", "t", 2, name="app", keys=3, resend=(1, 1))
    assert produced.last_sequence_id == -1
    assert produced.sent == [SentMessage(0, "5:0:-1"), SentMessage(1, "5:1:-1")]
    assert produced.resent == [SentMessage(1, "-1:-1:-1")]
    assert calls[0][:4] == ("produce", "pulsar://h:1", "t", "2")
    assert {"name=app", "keys=3", "resend=1-1", "chunking=false"} <= set(calls[0])


def test_consume_events_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_run(
        monkeypatch,
        "\n".join(
            [
                '{"event":"received","key":"k1","size":3,"sha256":"ab","value":"m-1",'
                '"sequenceId":1,"producerName":"p","messageId":"5:1:-1"}',
                '{"event":"received","key":null,"size":900,"sha256":"cd",'
                '"sequenceId":2,"producerName":"p","messageId":"5:2:-1"}',
                '{"event":"timeout","after":2}',
                '{"event":"done"}',
            ]
        ),
    )
    consumed = java_consume("pulsar://h:1", "t", "sub", 3)
    assert consumed.timed_out
    assert consumed.messages == [
        ReceivedMessage("k1", 3, "ab", "m-1", 1, "p", "5:1:-1"),
        ReceivedMessage(None, 900, "cd", None, 2, "p", "5:2:-1"),
    ]


def test_a_failed_run_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_run(monkeypatch, '{"event":"producer","lastSequenceId":-1}', code=1)
    with pytest.raises(DevServerError, match="a stack trace"):
        java_produce("pulsar://h:1", "t", 1)
