"""Graceful, bounded shutdown: SIGTERM under load loses nothing, leaves a final PIP-6
snapshot, and ends within ``brokerShutdownTimeoutMs`` even with Kafka gone."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pulsar

from dedup_broker.devservers import KafkaService
from harness.publisher import Publisher, stored_ids
from tests.integration.conftest import make_broker

TOTAL = 6000


def test_sigterm_under_load_loses_nothing_and_a_restart_replays_nothing(
    kafka_bootstrap: str, tmp_path: Path, topic: str
) -> None:
    broker = make_broker(
        kafka_bootstrap,
        tmp_path,
        broker_deduplication_enabled=True,
        # No snapshot on the way: only the one taken at shutdown can cover the entries.
        broker_deduplication_entries_interval=1_000_000,
        broker_deduplication_snapshot_interval_seconds=3600,
        broker_shutdown_timeout_ms=20_000,
        # Keep consumed ledgers, so the whole topic can be read back at the end.
        default_retention_time_in_minutes=-1,
        default_retention_size_in_mb=-1,
    )
    broker.start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    received: set[int] = set()
    try:
        consumer = client.subscribe(topic, "shutdown-sub")
        stop_consuming = threading.Event()

        def consume() -> None:
            while not stop_consuming.is_set():
                try:
                    message = consumer.receive(200)
                except pulsar.Timeout:
                    continue
                received.add(int(message.data()))
                consumer.acknowledge(message)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        publisher = Publisher(client, topic, TOTAL, batching=True, name="graceful")
        publisher.thread.start()
        publisher.wait_for(TOTAL // 3)

        code, seconds = broker.terminate(timeout=60)
        assert code == 0, broker.tail()
        assert seconds < 25, f"shutdown took {seconds:.1f} s"
        first_run = broker.log_text()
        assert "stopped" in first_run

        broker.start()
        publisher.thread.join(timeout=300)
        assert not publisher.errors, publisher.errors[:3]
        assert publisher.acknowledged == TOTAL
        assert stored_ids(client, topic) == list(range(TOTAL))
        deadline = TOTAL
        for _ in range(600):
            if len(received) >= deadline:
                break
            threading.Event().wait(0.1)
        stop_consuming.set()
        reader.join(timeout=10)
        assert received == set(range(TOTAL))

        # The restarted broker found a snapshot covering every entry written before the
        # shutdown: its recovery replayed nothing.
        recovered = re.findall(
            r"deduplication enabled on [^:]+: .* (\d+) entries replayed", broker.log_text()
        )
        assert recovered and recovered[0] == "0", broker.tail(80)
    finally:
        client.close()
        broker.stop()


def test_shutdown_is_bounded_with_kafka_down(
    native_kafka: KafkaService, tmp_path: Path, topic: str
) -> None:
    broker = make_broker(
        native_kafka.bootstrap_servers,
        tmp_path,
        broker_deduplication_enabled=True,
        broker_shutdown_timeout_ms=5000,
    )
    broker.start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, producer_name="before-outage")
        for i in range(100):
            producer.send(str(i).encode(), sequence_id=i)
        consumer = client.subscribe(
            topic, "outage-sub", initial_position=pulsar.InitialPosition.Earliest
        )
        consumer.acknowledge(consumer.receive(10_000))
        native_kafka.kill()

        code, seconds = broker.terminate(timeout=30)
        assert code == 0, broker.tail()
        assert seconds < 5 + 5, f"shutdown took {seconds:.1f} s with Kafka down"
        log = broker.log_text()
        assert "did not finish within 5000 ms" in log
        # librdkafka's reconnect failures are held back, not printed every 50 ms.
        failures = [line for line in log.splitlines() if "Connection refused" in line]
        assert len(failures) < 20, failures[:5]
    finally:
        client.close()
        broker.stop()
