"""``make bench``, Spark part: rows/s through ``PulsarSink`` next to Spark's Kafka sink.

The same cached DataFrame is written, in one run on the same Kafka, by:

- Spark's own Kafka sink (``spark-sql-kafka-0-10``, at-least-once) into a one-partition
  Kafka topic: the baseline;
- ``PulsarSink`` in sequence mode through the broker with deduplication on, into a
  non-partitioned topic (one Kafka ledger topic);
- ``PulsarSink`` replaying the same batch (every row already stored: nothing is sent).

Each is warmed up first (JVM classes, Python workers), so the figures are steady-state.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.spark_kafka_connector import connector_jars
from connectors.local_spark import local_session
from connectors.sink import PulsarSink
from dedup_broker.testing.broker_process import BrokerProcess

WARM_UP_ROWS = 2_000


def run(bootstrap: str, rows: int, size: int, partitions: int = 2) -> None:
    """Measure and print the Spark table."""
    import pyspark

    jars = connector_jars(pyspark.__version__)
    spark = local_session(
        f"local[{partitions}]",
        "dedup-broker-bench",
        extra={"spark.jars": ",".join(str(j) for j in jars)},
    )
    broker = BrokerProcess(
        bootstrap,
        cluster_name=f"bench-spark-{uuid.uuid4().hex[:6]}",
        settings={"broker_deduplication_enabled": True},
        log_dir=Path(tempfile.mkdtemp(prefix="bench-spark-")),
    )
    with broker:
        data = _rows(spark, rows, size, partitions).cache()
        data.count()
        warm = _rows(spark, WARM_UP_ROWS, size, partitions)
        _kafka_write(spark, bootstrap, warm)
        _sink_write(broker.service_url, _topic(), warm, 0)

        kafka_seconds = _kafka_write(spark, bootstrap, data)
        topic = _topic()
        sink_seconds = _sink_write(broker.service_url, topic, data, 0)
        replay_seconds = _sink_write(broker.service_url, topic, data, 0)
        data.unpersist()
    spark.stop()

    connector = next(j.name for j in jars if j.name.startswith("spark-sql-kafka"))
    base = rows / kafka_seconds
    print(f"\nSpark local[{partitions}], {rows} rows of {size} bytes ({connector})\n")
    print(f"{'':48} {'rows/s':>10} {'ratio':>6}")
    for label, seconds in (
        ("Spark Kafka sink (at-least-once, baseline)", kafka_seconds),
        ("PulsarSink via the broker (dedup on)", sink_seconds),
        ("PulsarSink replaying the same batch", replay_seconds),
    ):
        print(f"{label:48} {rows / seconds:10.0f} {rows / seconds / base:6.2f}")


def _rows(spark: Any, count: int, size: int, partitions: int) -> Any:
    from pyspark.sql import functions as f

    return spark.range(0, count, numPartitions=partitions).select(
        f.rpad(f.col("id").cast("string"), size, "x").alias("value")
    )


def _topic() -> str:
    return f"persistent://public/default/bench-spark-{uuid.uuid4().hex[:8]}"


def _kafka_write(spark: Any, bootstrap: str, data: Any) -> float:
    topic = f"bench-spark-kafka-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    started = time.perf_counter()
    (
        data.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.acks", "all")
        .option("topic", topic)
        .save()
    )
    return time.perf_counter() - started


def _sink_write(service_url: str, topic: str, data: Any, batch_id: int) -> float:
    sink = PulsarSink(service_url, topic, name="bench")
    started = time.perf_counter()
    sink.write(data, batch_id)
    return time.perf_counter() - started
