"""``make bench``, Spark part: the connectors next to Spark's own Kafka connector.

Sinks: the same cached DataFrame is written, in one run on the same Kafka, by

- Spark's own Kafka sink (``spark-sql-kafka-0-10``, at-least-once) into a one-partition
  Kafka topic: the baseline;
- ``PulsarSink`` (``foreachBatch``'s sink) in sequence mode through the broker with
  deduplication on, into a non-partitioned topic (one Kafka ledger topic);
- the Data Source sink, ``df.write.format("dedup-broker")``, the same way;
- each of the two replaying its last batch (every row already stored: nothing is sent).

Sources: the same number of records of the same size is read, with one Spark task each,

- by Spark's Kafka source, ``spark.read.format("kafka")``, from a one-partition Kafka topic
  written directly with confluent-kafka: the baseline;
- by ``spark.read.format("dedup-broker")`` from the topic the Data Source sink wrote.

The connectors run on their default, lean client; ``--official`` adds the same paths on
the official ``pulsar-client`` (option ``client="official"``) for comparison.

Every path is warmed up first (JVM classes, Python workers), then timed three times; the
best of the three counts. Alone: ``python -m bench.spark_connectors [--rows N --size B]
[--official]``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.brokers import bench_broker
from bench.spark_kafka_connector import connector_jars
from connectors.datasource import FORMAT, register
from connectors.local_spark import local_session
from connectors.sink import PulsarSink
from connectors.sink_options import ClientKind
from dedup_broker.devservers import provide_kafka
from harness.broker_process import BrokerProcess

WARM_UP_ROWS = 2_000
RUNS = 3
CLIENTS = (ClientKind.LEAN, ClientKind.OFFICIAL)


class Timing(NamedTuple):
    """One path's best time; ``judged``: whether it counts for a target (a replay sends
    nothing, so it does not)."""

    label: str
    seconds: float
    judged: bool = True


def run(bootstrap: str, rows: int, size: int, partitions: int = 2, official: bool = False) -> None:
    """Measure and print the Spark tables (``official``: the official client's paths too)."""
    import pyspark

    jars = connector_jars(pyspark.__version__)
    spark = local_session(
        f"local[{partitions}]",
        "dedup-broker-bench",
        extra={"spark.jars": ",".join(str(j) for j in jars)},
    )
    register(spark)
    broker = bench_broker(bootstrap, "spark", broker_deduplication_enabled=True)
    with broker:
        paths = _Paths(spark, bootstrap, broker)
        data = _rows(spark, rows, size, partitions).cache()
        data.count()
        warm = _rows(spark, WARM_UP_ROWS, size, partitions)
        sinks: list[tuple[str, Callable[..., float], tuple[Any, ...], bool]] = [
            ("Spark Kafka sink (at-least-once, baseline)", paths.kafka_write, (), True),
        ]
        for client in CLIENTS if official else CLIENTS[:1]:
            note = "" if client is ClientKind.LEAN else " [official client]"
            sinks += [
                (
                    f"PulsarSink via the broker (dedup on){note}",
                    paths.pulsar_sink_write,
                    (client,),
                    True,
                ),
                (
                    f"PulsarSink replaying the same batch{note}",
                    paths.pulsar_sink_replay,
                    (client,),
                    False,
                ),
                (
                    f'format("dedup-broker") sink (dedup on){note}',
                    paths.datasource_write,
                    (client,),
                    True,
                ),
                (
                    f'format("dedup-broker") replaying{note}',
                    paths.datasource_replay,
                    (client,),
                    False,
                ),
            ]
        sink_seconds = [
            Timing(label, _best(write, (warm, *extra), (data, *extra)), judged)
            for label, write, extra, judged in sinks
        ]
        data.unpersist()

        kafka_topic = paths.kafka_fill(rows, size)
        warm_kafka = paths.kafka_fill(WARM_UP_ROWS, size)
        broker_topic = paths.last_datasource_topic
        warm_broker = paths.datasource_fill(warm)
        source_seconds = [
            Timing(
                "Spark Kafka source (baseline)",
                _best(paths.kafka_read, (warm_kafka, WARM_UP_ROWS), (kafka_topic, rows)),
            )
        ]
        for client in CLIENTS if official else CLIENTS[:1]:
            note = "" if client is ClientKind.LEAN else " [official client]"
            source_seconds.append(
                Timing(
                    f'format("dedup-broker") source{note}',
                    _best(
                        paths.datasource_read,
                        (warm_broker, WARM_UP_ROWS, client),
                        (broker_topic, rows, client),
                    ),
                )
            )
    spark.stop()

    connector = next(j.name for j in jars if j.name.startswith("spark-sql-kafka"))
    print(f"\nSpark local[{partitions}], {rows} rows of {size} bytes ({connector}), best of {RUNS}")
    _table(f"sinks, {partitions} Spark partitions", rows, sink_seconds)
    _table("sources, one topic partition (one Spark task)", rows, source_seconds)
    print("\n" + targets(sink_seconds, source_seconds))


def targets(sinks: list[Timing], sources: list[Timing]) -> str:
    """Each connector's writes and reads next to Spark's own Kafka connector's (the first
    timing of each list) from the same run (the target: at least as fast); timings not
    judged (replays) are left out."""
    lines = ["targets (this run; at least 1.00 x Spark's Kafka connector):"]
    for kind, timings in (("sink", sinks), ("source", sources)):
        anchor, *paths = timings
        for label, took, judged in paths:
            if not judged:
                continue
            ratio = anchor.seconds / took
            verdict = "met" if ratio >= 1.0 else "not met"
            lines.append(f"  {kind}: {label}: {ratio:.2f} x Spark's Kafka {kind}: {verdict}")
    return "\n".join(lines)


def _best(measure: Callable[..., float], warm_up: tuple[Any, ...], timed: tuple[Any, ...]) -> float:
    """Seconds of the fastest of ``RUNS`` calls with ``timed``, after one with ``warm_up``."""
    measure(*warm_up)
    return min(measure(*timed) for _ in range(RUNS))


def _table(title: str, rows: int, timings: list[Timing]) -> None:
    base = rows / timings[0].seconds
    print(f"\n{title:58} {'rows/s':>10} {'ratio':>6}")
    for label, took, _ in timings:
        print(f"{label:58} {rows / took:10.0f} {rows / took / base:6.2f}")


def _rows(spark: Any, count: int, size: int, partitions: int) -> Any:
    from pyspark.sql import functions as f

    return spark.range(0, count, numPartitions=partitions).select(
        f.rpad(f.col("id").cast("string"), size, "x").alias("value")
    )


def _topic() -> str:
    return f"persistent://public/default/bench-spark-{uuid.uuid4().hex[:8]}"


class _Paths:
    """The timed operations; each returns its seconds."""

    def __init__(self, spark: Any, bootstrap: str, broker: BrokerProcess) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.broker = broker
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.last_sink_topic = ""
        self.last_datasource_topic = ""

    def _kafka_topic(self) -> str:
        topic = f"bench-spark-kafka-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        return topic

    # --- sinks ---------------------------------------------------------------------------
    def kafka_write(self, data: Any) -> float:
        topic = self._kafka_topic()
        started = time.perf_counter()
        (
            data.write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("kafka.acks", "all")
            .option("topic", topic)
            .save()
        )
        return time.perf_counter() - started

    def pulsar_sink_write(self, data: Any, client: ClientKind = ClientKind.LEAN) -> float:
        self.last_sink_topic = _topic()
        return self.pulsar_sink_replay(data, client)

    def pulsar_sink_replay(self, data: Any, client: ClientKind = ClientKind.LEAN) -> float:
        sink = PulsarSink(
            self.broker.service_url, self.last_sink_topic, name="bench", client=client
        )
        started = time.perf_counter()
        result = sink.write(data, 0)
        took = time.perf_counter() - started
        assert result.stored + result.replayed == result.rows, result
        return took

    def datasource_write(self, data: Any, client: ClientKind = ClientKind.LEAN) -> float:
        self.last_datasource_topic = _topic()
        return self.datasource_replay(data, client)

    def datasource_replay(self, data: Any, client: ClientKind = ClientKind.LEAN) -> float:
        started = time.perf_counter()
        (
            data.write.format(FORMAT)
            .option("serviceUrl", self.broker.service_url)
            .option("topic", self.last_datasource_topic)
            .option("name", "bench")
            .option("batchId", 0)
            .option("client", client.value)
            .mode("append")
            .save()
        )
        return time.perf_counter() - started

    # --- sources -------------------------------------------------------------------------
    def kafka_fill(self, count: int, size: int) -> str:
        """A one-partition Kafka topic of ``count`` records of ``size`` bytes."""
        topic = self._kafka_topic()
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        for i in range(count):
            value = str(i).encode().ljust(size, b"x")
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(60) == 0, "records of the Kafka source's topic not delivered"
        return topic

    def datasource_fill(self, data: Any) -> str:
        self.datasource_write(data)
        return self.last_datasource_topic

    def kafka_read(self, topic: str, count: int) -> float:
        reader = (
            self.spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
        return _timed_read(reader, count)

    def datasource_read(
        self, topic: str, count: int, client: ClientKind = ClientKind.LEAN
    ) -> float:
        reader = (
            self.spark.read.format(FORMAT)
            .option("serviceUrl", self.broker.service_url)
            .option("adminUrl", self.broker.http_url)
            .option("topic", topic)
            .option("client", client.value)
        )
        return _timed_read(reader, count)


def _timed_read(reader: Any, count: int) -> float:
    """Load and read every row's value; fails unless there were ``count`` rows."""
    from pyspark.sql import functions as f

    started = time.perf_counter()
    found = reader.load().agg(f.count("*"), f.sum(f.length("value"))).collect()[0][0]
    took = time.perf_counter() - started
    assert found == count, f"read {found} rows, expected {count}"
    return took


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_connectors")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--official", action="store_true", help="also the paths on the official client"
    )
    args = parser.parse_args()
    kafka = provide_kafka()
    try:
        run(kafka.bootstrap_servers, args.rows, args.size, official=args.official)
    finally:
        kafka.stop()


if __name__ == "__main__":
    main()
