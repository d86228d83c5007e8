"""The Spark bench's verdicts: each connector against Spark's Kafka connector, same run."""

from __future__ import annotations

from bench.spark_connectors import Timing, targets


def test_writes_and_reads_are_judged_against_the_kafka_connector_and_replays_are_left_out() -> None:
    sinks = [
        Timing("Spark Kafka sink (at-least-once, baseline)", 2.0),
        Timing("PulsarSink via the broker (dedup on)", 1.6),
        Timing("PulsarSink replaying the same batch", 0.1, judged=False),
        Timing('format("dedup-broker") sink (dedup on)', 2.5),
    ]
    sources = [
        Timing("Spark Kafka source (baseline)", 1.0),
        Timing('format("dedup-broker") source', 1.0),
    ]
    assert targets(sinks, sources).splitlines() == [
        "targets (this run; at least 1.00 x Spark's Kafka connector):",
        "  sink: PulsarSink via the broker (dedup on): 1.25 x Spark's Kafka sink: met",
        '  sink: format("dedup-broker") sink (dedup on): 0.80 x Spark\'s Kafka sink: not met',
        '  source: format("dedup-broker") source: 1.00 x Spark\'s Kafka source: met',
    ]
