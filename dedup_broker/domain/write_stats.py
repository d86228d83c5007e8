"""A topic's storage writes per stats period, in Pulsar's buckets.

Pulsar's ``pulsar_storage_write_latency_le_*`` and ``pulsar_entry_size_le_*`` are the
entries written in the last stats period (``statsUpdateFrequencyInSecs``) whose latency
or size fell in each bucket, with their count and sum: gauges of one period, not
counters. The publish path counts into the period running; the stats update closes it
(``roll``), and ``/metrics`` shows the last closed one, as Pulsar's broker does.
"""

from __future__ import annotations

from bisect import bisect_left

LATENCY_BOUNDS_US = (500, 1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 1_000_000)
"""Upper bounds of Pulsar's write-latency buckets, in microseconds (then overflow)."""
LATENCY_SUFFIXES = (
    *("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000"),
    "overflow",
)
LATENCY_NAMES = (
    *(f"pulsar_storage_write_latency_{s}" for s in LATENCY_SUFFIXES),
    "pulsar_storage_write_latency_count",
    "pulsar_storage_write_latency_sum",
)
"""Pulsar's names: ten buckets (milliseconds in the name), count, sum (microseconds)."""

SIZE_BOUNDS = (128, 512, 1024, 2048, 4096, 16_384, 102_400, 1_232_896)
"""Upper bounds of Pulsar's entry-size buckets, in bytes (then overflow)."""
SIZE_SUFFIXES = ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow")
SIZE_NAMES = (
    *(f"pulsar_entry_size_le_{s}" for s in SIZE_SUFFIXES),
    "pulsar_entry_size_count",
    "pulsar_entry_size_sum",
)

_SIZES = len(LATENCY_BOUNDS_US) + 1
_COUNT = _SIZES + len(SIZE_BOUNDS) + 1
_LATENCY_SUM = _COUNT + 1
_SIZE_SUM = _COUNT + 2
WIDTH = len(LATENCY_NAMES) + len(SIZE_NAMES)
NO_WRITES: tuple[int, ...] = (0,) * WIDTH


class WriteStats:
    """Counts of the period running and figures of the last one closed.

    Nothing is allocated until a topic's first write: most topics of a large broker
    are idle.
    """

    __slots__ = ("_counting", "period")

    def __init__(self) -> None:
        self._counting: list[int] | None = None
        self.period: tuple[int, ...] = NO_WRITES
        """The last closed period, in the order of ``LATENCY_NAMES + SIZE_NAMES``."""

    def record(self, seconds: float, size: int) -> None:
        counts = self._counting
        if counts is None:
            counts = self._counting = [0] * (_SIZE_SUM + 1)
        micros = int(seconds * 1_000_000)
        counts[bisect_left(LATENCY_BOUNDS_US, micros)] += 1
        counts[_SIZES + bisect_left(SIZE_BOUNDS, size)] += 1
        counts[_COUNT] += 1
        counts[_LATENCY_SUM] += micros
        counts[_SIZE_SUM] += size

    def roll(self) -> None:
        """Close the period running: its figures become the ones shown."""
        counts, self._counting = self._counting, None
        if counts is None:
            self.period = NO_WRITES
            return
        sizes = counts[_SIZES:_COUNT]
        self.period = (
            *counts[:_SIZES],
            counts[_COUNT],
            counts[_LATENCY_SUM],
            *sizes,
            counts[_COUNT],
            counts[_SIZE_SUM],
        )
