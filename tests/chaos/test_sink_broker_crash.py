"""kill -9 of the broker while the Spark sink publishes: each row stored exactly once.

The write either rides the crash out (the client reconnects and resends what was not
acknowledged; the broker drops what it already had) or fails; Spark's answer to a failed
batch is to run it again, which the test does in both cases.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import functions as f

from connectors.sink import PulsarSink, SinkResult
from connectors.sink_options import ProducerSettings
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stored_values

pytestmark = pytest.mark.chaos

ROWS = 150_000
KILL_AFTER = 20_000
"""Messages the broker must have received before it is killed."""


def _received(broker: BrokerProcess, topic: str) -> int:
    path = topic.replace("://", "/", 1)
    status, body = http_request("GET", f"{broker.http_url}/admin/v2/{path}/stats")
    return int(json.loads(body).get("msgInCounter", 0)) if status == 200 else 0


def test_broker_killed_during_a_sink_write_stores_each_row_once(
    spark: Any, dedup_broker: BrokerProcess, topic: str
) -> None:
    df = spark.range(0, ROWS, numPartitions=2).select(
        f.concat(f.lit("row-"), f.col("id")).alias("value")
    )
    sink = PulsarSink(
        dedup_broker.service_url,
        topic,
        name="crash",
        producer=ProducerSettings(send_timeout_ms=10_000),
    )
    outcome: dict[str, SinkResult | BaseException] = {}

    def write() -> None:
        try:
            outcome["result"] = sink.write(df, batch_id=0)
        except Exception as exc:  # the batch failed: Spark would run it again
            outcome["error"] = exc

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    deadline = time.monotonic() + 120
    while _received(dedup_broker, topic) < KILL_AFTER:
        assert writer.is_alive(), f"the write ended before the crash: {outcome}"
        assert time.monotonic() < deadline, "the sink never got going"
        time.sleep(0.05)
    dedup_broker.kill()
    time.sleep(2.0)
    dedup_broker.start()
    writer.join(timeout=300)
    assert not writer.is_alive()

    replay = sink.write(df, batch_id=0)  # what a restarted query does with the batch
    assert replay.rows == ROWS
    assert replay.stored < ROWS
    stored = stored_values(dedup_broker.service_url, topic)
    assert Counter(stored) == Counter(f"row-{i}" for i in range(ROWS))
