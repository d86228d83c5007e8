"""The sink with tasks that fail on their first attempt: every row stored exactly once."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark import TaskContext
from pyspark.sql import functions as f
from pyspark.sql.types import StringType

from connectors.sink import PulsarSink
from connectors.sink_options import ProducerSettings
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess, free_port
from tests.integration.connectors.sink_fixtures import (
    received_messages,
    stored_messages,
    stored_values,
)

FAILURE_DELAY_SECONDS = 3.0
PAD = "x" * 200
"""Rows reach a Python task in 64 KiB chunks: padded rows make a failing task publish some."""
ARROW_BATCH_ROWS = 200
"""The same for Arrow batches: small ones make a failing task publish some first."""


@pytest.fixture(autouse=True)
def small_arrow_batches(spark: Any) -> Iterator[None]:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(key)
    spark.conf.set(key, str(ARROW_BATCH_ROWS))
    try:
        yield
    finally:
        spark.conf.set(key, previous)


def _fail_first_attempt_at(*values: str) -> Any:
    """The value unchanged, but the task's first attempt raises when it reaches ``values``.

    Before raising it gives the sink a moment to publish the rows it already has, so that
    the retry meets rows its first attempt stored.
    """
    targets = set(values)

    def value(payload: str) -> str:
        context = TaskContext.get()
        if payload in targets and context is not None and context.attemptNumber() == 0:
            time.sleep(FAILURE_DELAY_SECONDS)
            raise RuntimeError(f"injected failure at {payload} on the first attempt")
        return payload

    return f.udf(value, StringType()).asNondeterministic()


def test_sequence_mode_task_failing_on_first_attempt_stores_each_row_once(
    spark: Any, dedup_broker: BrokerProcess, topic: str
) -> None:
    rows = [(i, f"row-{i}-{PAD}") for i in range(3000)]
    df = _rows(spark, 3000, "row-{id}", partitions=2)  # ids 0-1499 and 1500-2999
    failing = _fail_first_attempt_at(f"row-1200-{PAD}", f"row-2800-{PAD}")
    sink = PulsarSink(
        dedup_broker.service_url, topic, name="retries", value=failing(f.col("payload"))
    )

    first = sink.write(df, batch_id=0)

    expected = [payload for _, payload in rows]
    assert first.rows == 3000
    assert first.skipped > 0  # the second attempts found the first attempts' rows stored
    assert first.stored + first.replayed == 3000
    stored = stored_values(dedup_broker.service_url, topic)
    assert sorted(stored) == sorted(expected)
    assert len(stored) == len(set(stored))

    # The whole batch again (a micro-batch replay after a driver crash): nothing new.
    again = PulsarSink(dedup_broker.service_url, topic, name="retries", value="payload")
    assert again.write(df, batch_id=0).stored == 0
    # The next batch with new rows is stored in full.
    new = [(i, f"row-{i}-{PAD}") for i in range(3000, 3500)]
    assert again.write(spark.createDataFrame(new, df.schema), batch_id=1).stored == 500
    stored = stored_values(dedup_broker.service_url, topic)
    assert Counter(stored) == Counter(expected + [payload for _, payload in new])
    # Per Spark partition, rows keep their order.
    first_slice = [v for v in stored if int(v.split("-")[1]) < 1500]
    assert first_slice == [payload for _, payload in rows[:1500]]


def test_columns_mode_uses_source_partition_and_offset(
    spark: Any, dedup_broker: BrokerProcess, topic: str
) -> None:
    source = [(p, o, f"p{p}-o{o}-{PAD}") for p in range(3) for o in range(600)]
    shuffled = random.Random(7).sample(source, len(source))
    df = spark.createDataFrame(shuffled, "part int, offset long, payload string")
    failing = _fail_first_attempt_at(f"p0-o500-{PAD}", f"p1-o550-{PAD}", f"p2-o590-{PAD}")
    sink = PulsarSink(
        dedup_broker.service_url,
        topic,
        mode="columns",
        name="src",
        producer_column="part",
        sequence_column="offset",
        value=failing(f.col("payload")),
        properties=["part", "offset"],
    )

    result = sink.write(df, batch_id=0)

    assert result.rows == 1800
    assert result.skipped > 0
    messages = stored_messages(dedup_broker.service_url, topic)
    assert sorted(m.data().decode() for m in messages) == sorted(p for _, _, p in source)
    for m in messages:
        part, offset = m.properties()["part"], m.properties()["offset"]
        assert m.data().decode() == f"p{part}-o{offset}-{PAD}"
        assert m.producer_name() == f"src-{part}"

    # The source is re-read from earlier offsets (overlap) plus new ones: only new rows land.
    overlap = [(p, o, f"p{p}-o{o}-{PAD}") for p in range(3) for o in range(500, 700)]
    plain = PulsarSink(
        dedup_broker.service_url,
        topic,
        mode="columns",
        name="src",
        producer_column="part",
        sequence_column="offset",
        value="payload",
    )
    later = plain.write(spark.createDataFrame(overlap, df.schema), batch_id=1)
    assert (later.stored, later.replayed) == (300, 300)
    stored = stored_values(dedup_broker.service_url, topic)
    assert Counter(stored) == Counter([f"p{p}-o{o}-{PAD}" for p in range(3) for o in range(700)])


def test_partitioned_topic_routes_by_key_and_stores_each_row_once(
    spark: Any, dedup_broker: BrokerProcess, topic: str
) -> None:
    status, body = http_request(
        "PUT", f"{dedup_broker.http_url}/admin/v2/{_rest(topic)}/partitions", b"3"
    )
    assert status in (200, 204), body
    df = _rows(spark, 2000, "event-{id}", partitions=2).withColumn(
        "user", f.concat(f.lit("user-"), f.col("id") % 40)
    )
    failing = _fail_first_attempt_at(f"event-900-{PAD}", f"event-1900-{PAD}")
    sink = PulsarSink(
        dedup_broker.service_url, topic, name="keyed", key="user", value=failing(f.col("payload"))
    )

    sink.write(df, batch_id=0)
    assert sink.write(df, batch_id=0).stored == 0

    users_by_partition: dict[str, set[str]] = {}
    everything: list[str] = []
    for m in received_messages(dedup_broker.service_url, topic, 2000):
        everything.append(m.data().decode())
        users_by_partition.setdefault(m.partition_key(), set()).add(m.topic_name())
    assert sorted(everything) == sorted(f"event-{i}-{PAD}" for i in range(2000))
    assert all(len(partitions) == 1 for partitions in users_by_partition.values())
    assert len({p for ps in users_by_partition.values() for p in ps}) > 1


def test_a_broker_that_cannot_be_reached_fails_the_write(spark: Any, topic: str) -> None:
    df = spark.createDataFrame([(i, f"row-{i}") for i in range(10)], "id long, payload string")
    sink = PulsarSink(
        f"pulsar://127.0.0.1:{free_port()}",
        topic,
        name="unreachable",
        value="payload",
        producer=ProducerSettings(send_timeout_ms=2000),
        client_options={"operation_timeout_seconds": 2},
    )
    with pytest.raises(Exception, match=r"(?i)connect|timeout|pulsar"):
        sink.write(df, batch_id=0)


def _rows(spark: Any, count: int, pattern: str, partitions: int) -> Any:
    """``id``, ``payload`` = pattern with the id, then PAD; evenly split, ids in order."""
    prefix, suffix = pattern.split("{id}")
    return spark.range(0, count, numPartitions=partitions).select(
        "id",
        f.concat(f.lit(prefix), f.col("id"), f.lit(f"{suffix}-{PAD}")).alias("payload"),
    )


def _rest(topic: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x``."""
    return topic.replace("://", "/", 1)
