"""PIP-6 under failure: every sequence id stored exactly once, in order.

A publisher with ``send_timeout_millis=0`` (it never gives up) and a fixed producer name
sends a long run of sequence ids while the broker is killed, or Kafka stopped, and
restarted. The official client resends whatever it has not seen acknowledged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from dedup_broker.devservers import KafkaService
from dedup_broker.testing.broker_process import BrokerProcess
from tests.integration.conftest import make_broker

pytestmark = pytest.mark.chaos
RECEIVE_MS = 20_000


class Publisher:
    """Sends ids 0..total-1 from a thread; records which sends were acknowledged."""

    def __init__(self, client: pulsar.Client, topic: str, total: int, batching: bool) -> None:
        self.producer = client.create_producer(
            topic,
            producer_name="chaos-source",
            send_timeout_millis=0,
            batching_enabled=batching,
            batching_max_messages=20,
            max_pending_messages=200,
            block_if_queue_full=True,
        )
        self.total = total
        self.acknowledged = 0
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        done = threading.Semaphore(0)

        def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            if result != pulsar.Result.Ok:
                self.errors.append(RuntimeError(str(result)))
            self.acknowledged += 1
            done.release()

        try:
            for i in range(self.total):
                self.producer.send_async(str(i).encode(), callback, sequence_id=i)
            for _ in range(self.total):
                done.acquire(timeout=300)
        except BaseException as exc:
            self.errors.append(exc)

    def wait_for(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.acknowledged < count:
            assert time.monotonic() < deadline, f"stuck at {self.acknowledged}"
            time.sleep(0.02)


def _stored(client: pulsar.Client, topic: str) -> list[int]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(int(reader.read_next(RECEIVE_MS).data()))
    return out


def _run_with_failures(
    broker: BrokerProcess,
    topic: str,
    total: int,
    batching: bool,
    failure: Callable[[], None],
    rounds: int,
) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    try:
        publisher = Publisher(client, topic, total, batching)
        publisher.thread.start()
        for round_number in range(1, rounds + 1):
            publisher.wait_for(total * round_number // (rounds + 1))
            failure()
        publisher.thread.join(timeout=300)
        assert not publisher.thread.is_alive()
        assert not publisher.errors, publisher.errors[:3]
        assert publisher.acknowledged == total
        assert _stored(client, topic) == list(range(total))
    finally:
        client.close()


@pytest.mark.parametrize("batching", [False, True])
def test_broker_killed_three_times(
    kafka_bootstrap: str, tmp_path: Path, topic: str, batching: bool
) -> None:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_enabled=True,
        broker_deduplication_entries_interval=100,
    )
    broker.start()
    try:
        _run_with_failures(broker, topic, 6000, batching, lambda: broker.restart(kill=True), 3)
    finally:
        broker.stop()


def test_kafka_stopped_for_ten_seconds(
    native_kafka: KafkaService, tmp_path: Path, topic: str
) -> None:
    broker = make_broker(
        native_kafka.bootstrap_servers,
        tmp_path,
        broker_deduplication_enabled=True,
        kafka_delivery_timeout_ms=5000,
        kafka_request_timeout_ms=3000,
    )
    broker.start()

    def outage() -> None:
        native_kafka.stop()
        time.sleep(10)
        native_kafka.start()

    try:
        _run_with_failures(broker, topic, 3000, True, outage, 1)
    finally:
        broker.stop()


def test_application_crash_resumes_from_last_sequence_id(
    kafka_bootstrap: str, tmp_path: Path, topic: str
) -> None:
    broker = make_broker(kafka_bootstrap, tmp_path, broker_deduplication_enabled=True)
    broker.start()
    try:
        client = pulsar.Client(broker.service_url)
        producer = client.create_producer(topic, producer_name="app", batching_enabled=False)
        for i in range(500):
            producer.send(str(i).encode(), sequence_id=i)
        client.close()  # the application "crashes": a new process takes over
        client = pulsar.Client(broker.service_url)
        producer = client.create_producer(topic, producer_name="app", batching_enabled=False)
        resume = producer.last_sequence_id() + 1
        assert resume == 500
        for i in range(resume - 50, 1000):  # it even replays some already stored ids
            producer.send(str(i).encode(), sequence_id=i)
        assert _stored(client, topic) == list(range(1000))
        client.close()
    finally:
        broker.stop()
