"""Fixtures for tests that run a real broker process on the real Kafka."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from harness.broker_process import BrokerProcess


def make_broker(kafka_bootstrap: str, tmp_path: Path, **settings: object) -> BrokerProcess:
    return BrokerProcess(
        kafka_bootstrap,
        cluster_name=f"t-{uuid.uuid4().hex[:10]}",
        settings=settings,
        log_dir=tmp_path,
    )


def serve(kafka_bootstrap: str, folder: Path, **settings: object) -> Iterator[BrokerProcess]:
    """For fixtures (``yield from serve(...)``): a started broker of its own, stopped by pid
    when the fixture ends."""
    process = make_broker(kafka_bootstrap, folder, **settings)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own (own cluster name, so its Kafka topics are its own)."""
    yield from serve(kafka_bootstrap, tmp_path)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"
