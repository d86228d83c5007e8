"""Pulsar's rates (``msgRateIn``, ``msgThroughputOut``, ...): counters sampled once per
stats period (``statsUpdateFrequencyInSecs``), a rate being the difference between two
samples over the time between them.

The counters are the ones the publish and dispatch paths keep anyway; sampling them
periodically keeps those paths free of any rate work, and a stats request only reads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SampledRates:
    """Some counters as last sampled, and their rates (per second) over the last period."""

    at: float
    counts: tuple[int, ...]
    rates: tuple[float, ...]

    def sample(self, counts: tuple[int, ...], now: float) -> None:
        elapsed = now - self.at
        if elapsed <= 0:
            return
        self.rates = tuple(
            (new - old) / elapsed for new, old in zip(counts, self.counts, strict=True)
        )
        self.at = now
        self.counts = counts


def sampled(
    meter: SampledRates | None, counts: tuple[int, ...], now: float, since: float
) -> SampledRates | None:
    """``meter`` after a sample taken at ``now``. Counters never sampled were zero at
    ``since`` (the previous sampling of everything: they were either made after it or
    still zero then, since no meter is made while every count is zero, as for the many
    idle producers and consumers)."""
    if meter is None:
        if not any(counts):
            return None
        meter = SampledRates(since, (0,) * len(counts), (0.0,) * len(counts))
    meter.sample(counts, now)
    return meter


def rate(meter: SampledRates | None, index: int) -> float:
    """The ``index``-th rate of ``meter`` (0 before its first sample)."""
    return meter.rates[index] if meter is not None else 0.0


def average_size(throughput: float, rate_per_second: float) -> float:
    """Pulsar's ``averageMsgSize``: bytes per message over the last period (0: none)."""
    return throughput / rate_per_second if rate_per_second else 0.0
