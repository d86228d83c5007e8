"""The dedup-broker format in real Spark local mode on a real broker: a streaming read
with exact rows and ``maxOffsetsPerTrigger`` batches, a restart from the checkpoint that
reads exactly the new rows, a batch read, and a pipeline topic A -> readStream -> transform
-> writeStream -> topic B that holds each derived row once, also after a restart.

Spark's Python data sources need ``pyarrow`` in the driver's and workers' Python."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from connectors.datasource import FORMAT, register
from harness.broker_process import BrokerProcess
from tests.integration.connectors.sink_fixtures import stored_values

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def ds_spark(spark: Any) -> Any:
    register(spark)
    return spark


def publish(service_url: str, topic: str, values: list[str]) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_max_publish_delay_ms=5)
        for value in values:
            producer.send_async(value.encode(), lambda r, _m: None, partition_key=value)
        producer.flush()
    finally:
        client.close()


def read_stream(spark: Any, broker: BrokerProcess, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format(FORMAT)
        .option("serviceUrl", broker.service_url)
        .option("adminUrl", broker.http_url)
        .option("topic", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_until_idle(spark: Any, df: Any, checkpoint: Path) -> list[list[str]]:
    """Start the query, process everything available, stop it cleanly; rows per batch."""
    batches: list[list[str]] = []

    def collect(batch: Any, batch_id: int) -> None:
        rows = [row.value.decode() for row in batch.select("value").collect()]
        if rows:
            batches.append(rows)

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return batches


def test_stream_from_earliest_with_a_row_limit_then_a_restart(
    ds_spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    publish(broker.service_url, topic, [f"a{i}" for i in range(7)])
    df = read_stream(ds_spark, broker, topic, maxOffsetsPerTrigger="3")
    batches = run_until_idle(ds_spark, df, tmp_path / "cp")
    assert [len(b) for b in batches] == [3, 3, 1]
    assert [v for b in batches for v in b] == [f"a{i}" for i in range(7)]

    publish(broker.service_url, topic, ["b0", "b1"])
    again = run_until_idle(ds_spark, read_stream(ds_spark, broker, topic), tmp_path / "cp")
    assert [v for b in again for v in b] == ["b0", "b1"]

    latest = read_stream(ds_spark, broker, topic, startingOffsets="latest")
    assert run_until_idle(ds_spark, latest, tmp_path / "cp-latest") == []

    batch = (
        ds_spark.read.format(FORMAT)
        .option("serviceUrl", broker.service_url)
        .option("adminUrl", broker.http_url)
        .option("topic", topic)
        .load()
    )
    rows = batch.collect()
    assert [r.value.decode() for r in rows] == [*(f"a{i}" for i in range(7)), "b0", "b1"]
    assert {r.key for r in rows} == {r.value.decode() for r in rows}
    assert all(r.topic == topic and r.partition == -1 for r in rows)


def test_pipeline_a_to_b_each_derived_row_once_also_after_a_restart(
    ds_spark: Any, dedup_broker: BrokerProcess, tmp_path: Path
) -> None:
    source = f"persistent://public/default/a-{uuid.uuid4().hex[:8]}"
    target = f"persistent://public/default/b-{uuid.uuid4().hex[:8]}"
    publish(dedup_broker.service_url, source, [f"x{i}" for i in range(6)])

    def run() -> None:
        df = read_stream(ds_spark, dedup_broker, source, maxOffsetsPerTrigger="4")
        derived = df.selectExpr("key", "concat(CAST(value AS STRING), '-done') AS value")
        query = (
            derived.writeStream.format(FORMAT)
            .option("serviceUrl", dedup_broker.service_url)
            .option("topic", target)
            .option("name", "pipeline-test")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    run()
    # The last batch is replayed as after a crash between the write and the commit log.
    commit_dir = tmp_path / "cp" / "commits"
    last = max(int(p.name) for p in commit_dir.iterdir() if p.name.isdigit())
    (commit_dir / str(last)).unlink()
    (commit_dir / f".{last}.crc").unlink(missing_ok=True)
    publish(dedup_broker.service_url, source, ["y0", "y1"])
    run()
    expected = [f"x{i}-done" for i in range(6)] + ["y0-done", "y1-done"]
    assert sorted(stored_values(dedup_broker.service_url, target)) == sorted(expected)
