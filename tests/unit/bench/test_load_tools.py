"""pulsar-perf's rate as the publish bench reads it from the tool's timed log."""

from __future__ import annotations

import pytest

from bench.load_tools import ToolError, pulsar_perf_rate

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
