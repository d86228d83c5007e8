"""Allocation reports for memory investigations, off unless Python traces allocations.

Start the broker with ``PYTHONTRACEMALLOC=1`` (or ``=N`` for N frames per allocation)
and send it SIGUSR1: the first signal logs where the live memory was allocated (the
largest source lines); every later one logs what grew or shrank since the previous
signal. Without ``PYTHONTRACEMALLOC`` nothing is installed and nothing is traced.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections import Counter

log = logging.getLogger(__name__)

TOP_LINES = 30
TOP_GARBAGE_TYPES = 20


def collect_garbage_report(top: int = TOP_GARBAGE_TYPES) -> str:
    """Collect every generation, keeping what was garbage long enough to count its types."""
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        kinds = Counter(type(obj).__qualname__ for obj in gc.garbage)
        total = len(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
    most = ", ".join(f"{name} {count}" for name, count in kinds.most_common(top))
    return f"{total} objects of cyclic garbage collected: {most}"


class AllocationReports:
    def __init__(self, top: int = TOP_LINES) -> None:
        self.top = top
        self._previous: tracemalloc.Snapshot | None = None

    def report(self) -> None:
        garbage = collect_garbage_report()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        traced, peak = tracemalloc.get_traced_memory()
        if self._previous is None:
            lines = [str(s) for s in snapshot.statistics("lineno")[: self.top]]
            what = "largest"
        else:
            diff = snapshot.compare_to(self._previous, "lineno")
            lines = [str(s) for s in diff[: self.top]]
            what = "growth since the previous report"
        self._previous = snapshot
        log.info(
            "tracemalloc: %.1f MiB traced (peak %.1f MiB); %s; %s:\n  %s",
            traced / 2**20,
            peak / 2**20,
            garbage,
            what,
            "\n  ".join(lines),
        )
