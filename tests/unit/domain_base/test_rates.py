"""Rate meters: counters sampled once per stats period, a rate being the difference over
the time between two samples."""

from __future__ import annotations

from dedup_broker.domain_base.rates import SampledRates, average_size, rate, sampled


def test_a_rate_is_the_difference_over_the_elapsed_time() -> None:
    meter = SampledRates(10.0, (100, 4000), (0.0, 0.0))
    meter.sample((160, 6400), 12.0)
    assert meter.rates == (30.0, 1200.0)
    meter.sample((160, 6400), 16.0)  # a quiet period
    assert meter.rates == (0.0, 0.0)
    assert (meter.at, meter.counts) == (16.0, (160, 6400))


def test_a_sample_at_the_same_time_changes_nothing() -> None:
    meter = SampledRates(10.0, (0,), (5.0,))
    meter.sample((9,), 10.0)
    assert (meter.at, meter.counts, meter.rates) == (10.0, (0,), (5.0,))


def test_counters_never_sampled_started_from_zero_at_the_previous_sampling() -> None:
    assert sampled(None, (0, 0), 5.0, since=4.0) is None  # idle: no meter at all
    meter = sampled(None, (20, 2000), 5.0, since=3.0)
    assert meter is not None and meter.rates == (10.0, 1000.0)
    assert sampled(meter, (30, 3000), 6.0, since=5.0) is meter
    assert meter.rates == (10.0, 1000.0)


def test_rates_of_no_meter_are_zero_and_sizes_follow_the_rates() -> None:
    assert rate(None, 1) == 0.0
    assert rate(SampledRates(0.0, (0, 0), (2.0, 3.0)), 1) == 3.0
    assert average_size(1000.0, 4.0) == 250.0
    assert average_size(0.0, 0.0) == 0.0
