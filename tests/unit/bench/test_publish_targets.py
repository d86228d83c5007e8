"""The publish bench's verdicts, each figure against its anchor from the same run, and
what it records for the plots."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import pytest

from bench.load_tools import Measurement
from bench.publish import (
    DIRECT,
    KEY_WINDOW,
    KEYED_OFF,
    MAX_SETTLING_ROUNDS,
    Plan,
    Row,
    _together,
    measure,
    paced_quantiles,
    parse_case,
    recorded,
    settle,
    targets,
)


def _row(system: str, msgs_per_s: float, cpu_s: float, p50: float, p99: float) -> Row:
    """A row whose three fixed-rate runs have medians ``p50`` and ``p99``, the other two
    runs one below and one far above them."""
    saturated = Measurement(1_000_000, msgs_per_s, 0.0, 0.0, server_cpu={"server": cpu_s})
    paced = tuple(
        Measurement(500_000, msgs_per_s / 2, p50 + shift, p99 + 100 * shift)
        for shift in (1.0, 0.0, -0.5)
    )
    return Row(system, 1024, 1, saturated, paced, msgs_per_s / 2)


def test_each_target_is_judged_against_its_anchor_from_the_same_rows() -> None:
    rows = [
        _row(DIRECT, 300_000, 1.0, 5.0, 15.0),
        _row("broker, dedup off", 100_000, 5.0, 6.5, 12.0),
        _row("broker, dedup on", 100_000, 6.0, 7.5, 30.0),
        _row(KEY_WINDOW, 85_000, 20.0, 8.0, 40.0),
        _row(KEYED_OFF, 125_000, 5.0, 6.5, 12.0),
        _row("Pulsar, dedup off", 100_000, 6.0, 6.0, 13.0),
        _row("Pulsar, dedup on", 100_000, 3.0, 6.0, 20.0),
    ]
    lines = targets(rows).splitlines()[1:]
    assert lines == [
        "    1KB x 1 dedup off: CPU 5.00 us/msg vs Pulsar 6.00: met",
        "    1KB x 1 dedup off: p99 12.00 ms vs Pulsar 13.00: met",
        "    1KB x 1 dedup off: p50 6.50 ms vs Kafka's + 2 = 7.00: met",
        "    1KB x 1 dedup on : CPU 6.00 us/msg vs Pulsar 3.00: not met",
        "    1KB x 1 dedup on : p99 30.00 ms vs Pulsar 20.00: not met",
        "    1KB x 1 dedup on : p50 7.50 ms vs Kafka's + 2 = 7.00: not met",
        "    1KB x 1 key-window: 0.85 x broker, dedup off (target 0.80): met",
        "    1KB x 1 key-window: 0.68 x broker, off, keyed (target 0.80): not met",
        "    1KB x 1 key-window: p50 8.00 ms vs broker, off, keyed's + 2 = 8.50: met",
    ]
    rows[3] = _row(KEY_WINDOW, 85_000, 20.0, 8.75, 40.0)
    assert targets(rows).splitlines()[-1] == (
        "    1KB x 1 key-window: p50 8.75 ms vs broker, off, keyed's + 2 = 8.50: not met"
    )


def test_a_system_left_out_leaves_out_its_comparisons() -> None:
    rows = [_row("broker, dedup off", 100_000, 5.0, 6.5, 12.0)]
    assert targets(rows).splitlines()[1:] == []


def test_latency_is_the_median_of_the_fixed_rate_runs() -> None:
    saturated = Measurement(1_000_000, 200_000, 0.0, 0.0)
    runs = tuple(
        Measurement(1_000_000, 100_000, p50, p99) for p50, p99 in ((5, 96), (4, 12), (6, 15))
    )
    row = Row("broker, dedup on", 100, 1, saturated, runs, 100_000)
    assert (row.p50_ms, row.p99_ms) == (5, 15)
    assert Row("broker, dedup on", 100, 1, saturated, (), 100_000).p99_ms is None


def test_a_case_is_size_by_topics() -> None:
    assert parse_case("1024x4") == (1024, 4)
    assert parse_case("100X1") == (100, 1)
    for bad in ("100", "x4", "100x0", "big x 1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_case(bad)


def test_each_recorded_percentile_is_the_median_over_the_fixed_rate_runs() -> None:
    runs = tuple(
        Measurement(1000, 500.0, p50, p99, quantiles_ms=((0.5, p50), (0.99, p99), (1.0, top)))
        for p50, p99, top in ((5, 96, 300), (4, 12, 20), (6, 15, 40))
    )
    # one run printed fewer percentiles: only those every run has are kept
    runs += (Measurement(1000, 500.0, 5, 14, quantiles_ms=((0.5, 5.0), (0.99, 14.0))),)
    assert paced_quantiles(runs) == [[0.5, 5.0], [0.99, 14.5]]
    assert paced_quantiles(()) == []


def test_the_record_holds_each_row_s_rate_and_latency() -> None:
    row = _row(DIRECT, 300_000, 1.0, 5.0, 15.0)
    plan = Plan(((1024, 1),), 1_000_000, 10.0, 200_000)
    data = recorded([row], plan)
    assert data["paced_runs"] == 3
    assert data["rows"] == [
        {
            "system": DIRECT,
            "size": 1024,
            "topics": 1,
            "msgs_per_s": 300_000,
            "cpu_us_per_msg": 1.0,
            "paced_rate": 150_000,
            "p50_ms": 5.0,
            "p99_ms": 15.0,
            "latency_quantiles_ms": [],
        }
    ]


class _Turns:
    """A generator that reports runs by the turn they were made in (drift over time)."""

    def __init__(self, name: str, turns: list[str]) -> None:
        self.name, self.turns = name, turns

    def run(self, size: int, topics: int, messages: int, rate: float | None) -> Measurement:
        self.turns.append(f"{self.name} {'paced' if rate else messages}")
        return Measurement(messages, 1000.0 * len(self.turns), 1.0, 2.0)


def test_key_window_and_its_anchor_take_turns_at_saturation_and_at_half_load() -> None:
    def opener(name: str) -> Callable[[], AbstractContextManager[_Turns]]:
        return lambda: nullcontext(_Turns(name, []))

    systems = [(name, opener(name)) for name in ("a", KEYED_OFF, "b", KEY_WINDOW)]
    groups = _together(systems)  # type: ignore[arg-type]
    assert [[name for name, _ in group] for group in groups] == [
        ["a"],
        [KEYED_OFF, KEY_WINDOW],
        ["b"],
    ]

    turns: list[str] = []
    rows: list[Row] = []
    plan = Plan(((100, 1),), 10, 1.0, 4, paced_runs=2, saturation_runs=3)
    measure([(KEYED_OFF, _Turns("off", turns)), (KEY_WINDOW, _Turns("kw", turns))], plan, rows)
    assert turns == [
        "off 4",
        "kw 4",
        "off 10",
        "kw 10",
        "off 10",
        "kw 10",
        "off 10",
        "kw 10",
        "off paced",
        "kw paced",
        "off paced",
        "kw paced",
    ]
    # Each row is its own median run (the second of its three turns), paced at half of it.
    assert [(r.system, r.saturated.msgs_per_s, r.paced_rate, len(r.paced)) for r in rows] == [
        (KEYED_OFF, 5000.0, 2500.0, 2),
        (KEY_WINDOW, 6000.0, 3000.0, 2),
    ]


@pytest.mark.parametrize(
    ("compiling", "rounds"),
    [
        ([5.0, 2.0, 0.1, 0.0], 3),  # quiet in the third round
        ([0.0], 1),
        ([9.0] * 10, MAX_SETTLING_ROUNDS),  # never quiet: bounded
    ],
)
def test_a_case_is_warmed_until_kafkas_compilers_are_quiet(
    compiling: list[float], rounds: int
) -> None:
    """Settling rounds of the case, every system in each, until a round's JIT time per
    message is under the bound (two runs of 10,000 messages a round: 2 ms is 0.1 us each)."""
    turns: list[str] = []
    spent = iter(compiling)
    total = [0.0]

    class Compiling(_Turns):
        def run(self, size: int, topics: int, messages: int, rate: float | None) -> Measurement:
            if self.name == "kw":  # the round's compiling lands in its last run
                total[0] += next(spent) * 1e-3
            return super().run(size, topics, messages, rate)

    plan = Plan(((100, 4),), 10, 0.0, 10_000, jit_seconds=lambda: total[0])
    systems = [(KEYED_OFF, Compiling("off", turns)), (KEY_WINDOW, Compiling("kw", turns))]
    assert settle(systems, plan, 100, 4) == rounds
    assert turns == ["off 10000", "kw 10000"] * rounds


def test_without_kafkas_compilers_to_watch_nothing_is_added() -> None:
    turns: list[str] = []
    plan = Plan(((100, 1),), 10, 0.0, 10_000)
    assert settle([(KEYED_OFF, _Turns("off", turns))], plan, 100, 1) == 0
    assert turns == []
