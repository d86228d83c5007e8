"""The transactions tests' fixtures and helpers: the storage tests' fixtures (a cluster
name of their own per test on the real Kafka), a broker with transactions on, and what
readers and subscriptions of a topic receive."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from harness.broker_process import BrokerProcess
from harness.pulsar_java_txn import JavaTransactions
from tests.integration.conftest import serve
from tests.integration.storage.conftest import admin, make_config

__all__ = ["admin", "make_config", "subscribed", "txn_broker", "visible"]


@pytest.fixture
def txn_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, transaction_coordinator_enabled=True)


def visible(service_url: str, topic: str) -> list[str]:
    """Every message a new reader of ``topic`` receives, in order."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out: list[str] = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data().decode())
        return out
    finally:
        client.close()


def subscribed(service_url: str, topic: str, subscription: str, wait_ms: int) -> list[str]:
    """What a (Shared) consumer of the subscription receives before ``wait_ms`` pass
    without a message."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        out: list[str] = []
        while True:
            try:
                message = consumer.receive(wait_ms)
            except pulsar.Timeout:
                return out
            out.append(message.data().decode())
            consumer.acknowledge(message)
    finally:
        client.close()


TRANSACTION_TIMEOUT_S = 20


def abandon_then_see_it_aborted(service_url: str, topic: str) -> None:
    """A client dies with its transaction open on ``topic`` ("lost"); a plain message
    after it ("later") stays held until the coordinator aborts the transaction at its
    timeout, then only that one is visible (within 30 s more). The timeout outlasts the
    start of a second client JVM on a busy machine, so the hold is seen before it ends
    (on a machine so loaded that it is not, the hold is not judged: "later" may then be
    visible rightly)."""
    began = time.monotonic()
    with JavaTransactions(service_url) as java:
        java.new(timeout_seconds=TRANSACTION_TIMEOUT_S)
        java.send(topic, "lost")
        java.kill()  # the application dies with its transaction open
    with JavaTransactions(service_url) as java:
        java.send_plain(topic, "later")
    held = visible(service_url, topic)
    if time.monotonic() - began < TRANSACTION_TIMEOUT_S:  # read while it must hold
        assert held == []  # held behind the open transaction
    deadline = time.monotonic() + TRANSACTION_TIMEOUT_S + 30
    while visible(service_url, topic) != ["later"]:
        assert time.monotonic() < deadline, "the open transaction was never aborted"
        time.sleep(0.5)
