"""Allocation reports: the largest sites first, then what grew since the last report."""

from __future__ import annotations

import logging
import tracemalloc

import pytest

from dedup_broker.allocations import AllocationReports


def test_reports_largest_then_growth(caplog: pytest.LogCaptureFixture) -> None:
    tracemalloc.start()
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
        tracemalloc.stop()
    first, second = (r.getMessage() for r in caplog.records)
    assert "largest:" in first
    assert "growth since the previous report:" in second
    assert "test_allocations.py" in second
    assert "objects of cyclic garbage collected: list 7" in second
    assert len(kept) == 200
