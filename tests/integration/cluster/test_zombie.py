"""A zombie owner: paused (SIGSTOP) until another broker serves its topic, then resumed.

It must get no acknowledgement out for writes after the takeover, none of its late writes
may become visible, and the topic holds each message once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pulsar

from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from tests.integration.cluster.conftest import get_json, owner_of, read_all

REPLACED_SIGNS = ("slots lost", "write fence lost", "was changed by another broker")
"""What a broker logs on finding that another broker took over its topic."""


def served_by(asked: BrokerProcess, topic: str) -> int:
    """The broker port ``asked`` names as the topic's owner."""
    tenant, namespace, local = topic.removeprefix("persistent://").split("/", 2)
    data = get_json(f"{asked.http_url}/lookup/v2/topic/persistent/{tenant}/{namespace}/{local}")
    assert isinstance(data, dict)
    return int(str(data["brokerUrl"]).rsplit(":", 1)[-1])


def test_a_paused_owner_gets_nothing_acknowledged_after_a_takeover(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = {
        "broker_deduplication_enabled": True,
        "default_retention_time_in_minutes": -1,
        "default_retention_size_in_mb": -1,
    }
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=2, settings=settings)
    try:
        cluster.start()
        topic = f"persistent://public/default/zombie-{uuid.uuid4().hex[:8]}"
        first = pulsar.Client(cluster.service_url, operation_timeout_seconds=120)
        source = first.create_producer(
            topic, producer_name="source", send_timeout_millis=0, batching_enabled=False
        )
        for i in range(50):
            source.send(f"s{i}".encode(), sequence_id=i)
        zombie = owner_of(cluster, topic)
        successor = next(b for b in cluster if b is not zombie)
        assert zombie.process is not None

        os.kill(zombie.process.pid, signal.SIGSTOP)
        acked: list[int] = []
        failed: list[str] = []
        done = threading.Semaphore(0)

        def callback(index: int) -> object:
            def on_result(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    acked.append(index)
                else:
                    failed.append(str(result))
                done.release()

            return on_result

        # These reach the paused broker's socket: it would handle them after the takeover.
        for i in range(50, 100):
            source.send_async(f"s{i}".encode(), callback(i), sequence_id=i)

        deadline = time.monotonic() + 60
        while served_by(successor, topic) != successor.port:
            assert time.monotonic() < deadline, "no takeover of the paused broker's topic"
            time.sleep(0.2)
        second = pulsar.Client(successor.service_url, operation_timeout_seconds=60)
        fresh = second.create_producer(topic, producer_name="fresh", batching_enabled=False)
        for i in range(10):
            fresh.send(f"f{i}".encode(), sequence_id=i)
        taken_over_with = read_all(second, topic)
        assert not acked, "the paused broker acknowledged writes"

        os.kill(zombie.process.pid, signal.SIGCONT)
        for _ in range(50):
            assert done.acquire(timeout=120), f"stuck: {len(acked)} acknowledged"
        assert failed == []
        assert sorted(acked) == list(range(50, 100))

        stored = read_all(second, topic)
        from_source = [m for m in stored if m.startswith(b"s")]
        from_fresh = [m for m in stored if m.startswith(b"f")]
        assert from_source == [f"s{i}".encode() for i in range(100)]
        assert from_fresh == [f"f{i}".encode() for i in range(10)]
        # What was visible at the takeover is a prefix of what is stored now: no late write
        # of the paused broker slipped in before it.
        assert stored[: len(taken_over_with)] == taken_over_with
        # The resumed broker learnt it had been replaced: from the owners group (its slots
        # lost), from its write fence, or, when it rejoined before the group told it, from
        # the managed ledger's record that the new owner had changed. Once it is back in
        # the group the assignor may hand the slot back to it, so both brokers name one
        # owner, and that owner (fenced anew) serves exactly what was stored.
        log = zombie.log_text()
        assert any(sign in log for sign in REPLACED_SIGNS), log[-2000:]
        deadline = time.monotonic() + 60
        while (owner := served_by(successor, topic)) != served_by(zombie, topic):
            assert time.monotonic() < deadline, "the two brokers name different owners"
            time.sleep(0.2)
        third = pulsar.Client(f"pulsar://127.0.0.1:{owner}", operation_timeout_seconds=60)
        assert read_all(third, topic) == stored
        third.close()
        first.close()
        second.close()
    finally:
        for broker in cluster:
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)
        cluster.stop()
