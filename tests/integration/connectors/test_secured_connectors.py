"""The connectors on a broker that requires a token: the data source reads and writes with
``authToken``, ``PulsarSink``'s writers with the ``auth_token`` client option; without the
token the broker refuses them."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest

from connectors.client_security import new_client
from connectors.datasource import FORMAT, register
from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.timeout(400)

SECRET = secrets.token_bytes(32)
TOKEN = jwt.encode({"sub": "spark"}, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def secured(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    folder = tmp_path_factory.mktemp("secured-spark")
    key = folder / "secret.key"
    key.write_bytes(SECRET)
    yield from serve(
        kafka_bootstrap,
        folder,
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=f"file://{key}",
    )


def test_the_data_source_writes_and_reads_with_a_token(
    spark: Any, secured: BrokerProcess, tmp_path: Path
) -> None:
    register(spark)
    topic = f"persistent://public/default/secured-{uuid.uuid4().hex[:8]}"
    rows = [(f"k{i}", f"v{i}".encode()) for i in range(5)]
    (
        spark.createDataFrame(rows, "key string, value binary")
        .coalesce(1)
        .write.format(FORMAT)
        .option("serviceUrl", secured.service_url)
        .option("topic", topic)
        .option("mode", "key")
        .option("authToken", TOKEN)
        .mode("append")
        .save()
    )
    read = (
        spark.read.format(FORMAT)
        .option("serviceUrl", secured.service_url)
        .option("adminUrl", secured.http_url)
        .option("topic", topic)
        .option("authToken", TOKEN)
        .load()
    )
    assert sorted((r.key, bytes(r.value)) for r in read.collect()) == sorted(rows)


def test_the_client_options_carry_the_credentials(secured: BrokerProcess) -> None:
    topic = f"persistent://public/default/options-{uuid.uuid4().hex[:8]}"
    client = new_client(secured.service_url, {"auth_token": TOKEN, "operation_timeout_seconds": 10})
    try:
        client.create_producer(topic).send(b"with a token")
    finally:
        client.close()
    anonymous = new_client(secured.service_url, {"operation_timeout_seconds": 3})
    try:
        with pytest.raises((pulsar.AuthenticationError, pulsar.Timeout, pulsar.ConnectError)):
            anonymous.create_producer(topic)
    finally:
        anonymous.close()
