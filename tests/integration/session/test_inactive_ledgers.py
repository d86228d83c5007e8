"""``managedLedgerInactiveLedgerRolloverTimeSeconds`` with the official client: an idle
topic's ledger closes, is trimmed once consumed (its Kafka topic deleted), and the
producer that stayed connected publishes on into a ledger created by its next message.
Deduplication still knows every producer's last sequence id afterwards, after a restart
too: a retried message is stored once."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka.admin import AdminClient

from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve

RECEIVE_MS = 10_000


@pytest.fixture
def lazy_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(
        kafka_bootstrap,
        tmp_path,
        managed_ledger_inactive_ledger_rollover_time_seconds=1,
        broker_deduplication_enabled=True,
        broker_deduplication_snapshot_interval_seconds=1,
        # Deleted by the broker itself right after trimming (no deletion worker here).
        topic_two_phase_deletion_enabled=False,
    )


def _ledgers(broker: BrokerProcess, topic: str) -> list[dict[str, object]]:
    path = topic.replace("persistent://", "")
    url = f"{broker.http_url}/admin/v2/persistent/{path}/internalStats"
    with urllib.request.urlopen(url, timeout=10) as response:
        ledgers: list[dict[str, object]] = json.loads(response.read())["ledgers"]
        return ledgers


def _wait_trimmed(broker: BrokerProcess, topic: str) -> None:
    deadline = time.monotonic() + 30
    while _ledgers(broker, topic):
        assert time.monotonic() < deadline, _ledgers(broker, topic)
        time.sleep(0.2)


def _wait_deleted(admin: AdminClient, kafka_topic: str) -> None:
    deadline = time.monotonic() + 30
    while kafka_topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{kafka_topic} still in Kafka"
        time.sleep(0.2)


def _receive_all(consumer: pulsar.Consumer) -> list[bytes]:
    out = []
    while True:
        try:
            message = consumer.receive(RECEIVE_MS if not out else 2_000)
        except pulsar.Timeout:
            return out
        out.append(message.data())
        consumer.acknowledge(message)


def test_an_idle_consumed_topic_holds_no_ledger_and_serves_on(
    lazy_broker: BrokerProcess, topic: str
) -> None:
    broker = lazy_broker
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        for i in range(5):
            producer.send(b"m%d" % i, sequence_id=i)
        assert _receive_all(consumer) == [b"m%d" % i for i in range(5)]
        first = _ledgers(broker, topic)[0]["ledgerId"]
        # Closed for inactivity, consumed by the subscription and by deduplication's
        # snapshot: trimmed, its Kafka topic deleted.
        _wait_trimmed(broker, topic)
        _wait_deleted(admin, f"{broker.cluster_name}.ledger.{first}")
        # A reader finds nothing left to read (the last message id is -1:-1 now).
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert not reader.has_message_available()
        # The producer stayed connected: its next messages create the next ledger.
        for i in range(5, 8):
            producer.send(b"m%d" % i, sequence_id=i)
        assert _receive_all(consumer) == [b"m5", b"m6", b"m7"]
        assert reader.has_message_available()
        assert [reader.read_next(RECEIVE_MS).data() for _ in range(3)] == [b"m5", b"m6", b"m7"]
        assert not reader.has_message_available()
        reader.close()
        second = _ledgers(broker, topic)[0]["ledgerId"]
        assert isinstance(second, int) and isinstance(first, int) and second > first
        # A retry of an old message is a duplicate, although its ledger is gone.
        producer.close()
        retry = client.create_producer(topic, producer_name="p", batching_enabled=False)
        retry.send(b"m3", sequence_id=3)
        retry.send(b"m7", sequence_id=7)
        retry.close()
        _wait_trimmed(broker, topic)
    finally:
        client.close()

    broker.restart(kill=False)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        assert _ledgers(broker, topic) == []
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
        assert producer.last_sequence_id() == 7
        producer.send(b"m6", sequence_id=6)  # a retry after the restart: a duplicate
        producer.send(b"m8", sequence_id=8)
        assert _receive_all(consumer) == [b"m8"]
    finally:
        client.close()
