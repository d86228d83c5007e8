"""Allocation reports: the largest sites first, then what grew since the last report."""

from __future__ import annotations

import gc
import logging
import re
import tracemalloc

import pytest

from dedup_broker.allocations import AllocationReports


def test_reports_largest_then_growth(caplog: pytest.LogCaptureFixture) -> None:
    tracemalloc.start()
    gc.disable()  # no automatic collection may take the cycles before the report does
    try:
        reports = AllocationReports(top=5)
        with caplog.at_level(logging.INFO, logger="dedup_broker.allocations"):
            reports.report()
            kept = [bytearray(1000) for _ in range(200)]
            for _ in range(7):
                cycle: list[object] = []
                cycle.append(cycle)
            del cycle
            reports.report()
    finally:
        gc.enable()
        tracemalloc.stop()
    # Only the reports: a thread an earlier test in this worker left (Spark's gateway)
    # may log meanwhile.
    first, second = (r.getMessage() for r in caplog.records if r.name == "dedup_broker.allocations")
    assert "largest:" in first
    assert "growth since the previous report:" in second
    assert "test_allocations.py" in second
    # Other tests' threads may leave garbage of their own between the two reports.
    lists = re.search(r"objects of cyclic garbage collected: .*\blist (\d+)", second)
    assert lists is not None and int(lists.group(1)) >= 7
    assert len(kept) == 200
