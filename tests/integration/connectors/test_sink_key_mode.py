"""Key mode: rows with repeated keys, published twice, are stored once per key.

Relies on the broker's key-window deduplication (Redis), turned on per topic with
``POST .../{topic}/keyDeduplication`` and the partition key as the key source.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as f

from connectors.sink import PulsarSink
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.conftest import serve
from tests.integration.connectors.sink_fixtures import stored_messages

KEYS = 300


@pytest.fixture
def key_broker(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, redis_url=redis_url)


def test_key_mode_stores_each_key_once(spark: Any, key_broker: BrokerProcess, topic: str) -> None:
    path = topic.replace("://", "/", 1)
    status, body = http_request("PUT", f"{key_broker.http_url}/admin/v2/{path}")
    assert status in (200, 204), body
    policy = {"enabled": True, "keySource": "partitionKey", "window": "5m"}
    status, body = http_request(
        "POST",
        f"{key_broker.http_url}/admin/v2/{path}/keyDeduplication",
        json.dumps(policy).encode(),
    )
    assert status in (200, 204), f"key-window deduplication policy refused: {status} {body!r}"

    # Every key three times in the batch (a source that repeats itself), in two partitions.
    df = spark.range(0, 3 * KEYS, numPartitions=2).select(
        f.concat(f.lit("order-"), f.col("id") % KEYS).alias("order_id"),
        f.concat(f.lit("copy-"), f.col("id")).alias("value"),
    )
    sink = PulsarSink(key_broker.service_url, topic, mode="key", key="order_id")
    first = sink.write(df, batch_id=0)
    again = sink.write(df, batch_id=0)  # the whole batch replayed

    assert first.rows == again.rows == 3 * KEYS
    keys = [m.partition_key() for m in stored_messages(key_broker.service_url, topic)]
    assert Counter(keys) == Counter(f"order-{i}" for i in range(KEYS))
