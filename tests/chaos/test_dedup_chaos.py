"""PIP-6 under failure: every sequence id stored exactly once, in order.

A publisher with ``send_timeout_millis=0`` (it never gives up) and a fixed producer name
sends a long run of sequence ids while the broker is killed, or Kafka stopped, and
restarted. The official client resends whatever it has not seen acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from dedup_broker.devservers import KafkaService
from harness.broker_process import BrokerProcess
from harness.publisher import Publisher, stored_ids
from tests.integration.conftest import make_broker

pytestmark = pytest.mark.chaos
RECEIVE_MS = 20_000


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
        assert stored_ids(client, topic) == list(range(total))
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
        assert stored_ids(client, topic) == list(range(1000))
        client.close()
    finally:
        broker.stop()
