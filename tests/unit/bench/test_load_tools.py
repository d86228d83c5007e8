"""What the publish bench reads from its load generators' logs: pulsar-perf's rate, and
both tools' latency percentiles."""

from __future__ import annotations

import pytest

from bench.load_tools import (
    ToolError,
    kafka_perf_quantiles,
    pulsar_perf_quantiles,
    pulsar_perf_rate,
)

PERF = "INFO org.apache.pulsar.testclient.PerformanceProducer -"
LOG = "\n".join(
    [
        f"912 [main] {PERF} Starting Pulsar perf producer",
        f"1004 [pulsar-perf-producer-exec-1-1] {PERF} Created 4 producers",
        f"10912 [main] {PERF} Throughput produced:  820007 msg",
        f"13004 [pulsar-perf-producer-exec-1-1] {PERF} ------------- DONE (reached the "
        "maximum number: 1000000 of production) --------------",
        f"20911 [perf-client-shutdown] {PERF} Aggregated throughput stats --- 1003234 records "
        "sent --- 49824.608 msg/s --- 38.013 Mbit/s",
    ]
)


def test_the_rate_runs_from_the_producers_creation_to_the_last_receipt_counted() -> None:
    # 1,000,000 receipts in 12.0 s; the tool's own figure (49,825/s) counted 20 s.
    assert pulsar_perf_rate(LOG, 1_000_000) == pytest.approx(83_333.3, rel=1e-6)


def test_a_log_without_the_times_is_an_error_not_a_figure() -> None:
    untimed = "\n".join(line.partition(" ")[2] for line in LOG.splitlines())
    with pytest.raises(ToolError, match="producers' times"):
        pulsar_perf_rate(untimed, 1_000_000)


def test_pulsar_perf_s_percentiles_are_read_from_its_last_aggregated_line() -> None:
    latency = (
        f"20920 [perf-client-shutdown] {PERF} Aggregated latency stats --- Latency: mean:"
        "   5.466 ms - med:   5.108 - 95pct:   7.797 - 99pct:  10.500 - 99.9pct:  36.848 - "
        "99.99pct:  51.999 - 99.999pct:  53.887 - Max:  53.887"
    )
    assert pulsar_perf_quantiles(LOG + "\n" + latency) == (
        (0.5, 5.108),
        (0.95, 7.797),
        (0.99, 10.5),
        (0.999, 36.848),
        (0.9999, 51.999),
        (0.99999, 53.887),
        (1.0, 53.887),
    )
    assert pulsar_perf_quantiles(LOG) == ()


def test_producer_performance_s_percentiles_are_read_from_its_final_line() -> None:
    output = "\n".join(
        [
            "249946 records sent, 49989.2 records/sec (4.77 MB/sec), 3.1 ms avg latency, "
            "212.0 ms max latency.",
            "1000000 records sent, 498256.103637 records/sec (47.52 MB/sec), 4.21 ms avg "
            "latency, 212.00 ms max latency, 6 ms 50th, 9 ms 95th, 15 ms 99th, 41 ms 99.9th.",
        ]
    )
    assert kafka_perf_quantiles(output) == (
        (0.5, 6.0),
        (0.95, 9.0),
        (0.99, 15.0),
        (0.999, 41.0),
        (1.0, 212.0),
    )
    assert kafka_perf_quantiles(output.splitlines()[0]) == ()
