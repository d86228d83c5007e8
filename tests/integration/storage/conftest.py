"""Fixtures for storage tests on the real Kafka: a cluster name of their own per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from dedup_broker.config import BrokerConfig
from tests.integration.storage.helpers import ConfigFactory


@pytest.fixture
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def make_config(kafka_bootstrap: str, admin: AdminClient) -> Iterator[ConfigFactory]:
    """Configs sharing one fresh cluster name (several brokers of one cluster); every
    Kafka topic of that cluster is deleted afterwards."""
    cluster = f"st-{uuid.uuid4().hex[:10]}"

    def factory(**overrides: Any) -> BrokerConfig:
        settings: dict[str, Any] = {
            "cluster_name": cluster,
            "kafka_bootstrap_servers": kafka_bootstrap,
            "kafka_delivery_timeout_ms": 10000,
            "kafka_request_timeout_ms": 10000,
        }
        settings.update(overrides)
        return BrokerConfig(**settings)

    yield factory
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(cluster + ".")]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result()
