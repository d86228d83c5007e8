"""``python -m bench.plots``: the figures of docs/benchmarks.md as PNG files, drawn from
what the bench steps recorded (``bench.results``), so that a figure can be redrawn without
running its step again.

    python -m bench.plots [--results build/bench-results] [--out docs/images]

One PNG per figure; a figure whose step has recorded nothing is skipped with one line
saying which step to run. ``make bench`` runs it after the steps.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from bench import results

matplotlib.use("Agg")  # files only: no display, whatever the environment says

DEFAULT_OUT = results.REPO / "docs" / "images"
SIZE_INCHES = (8.0, 4.5)
DPI = 100
"""800 x 450 pixels: readable in the docs, a few tens of KB per file."""
PREFERRED_LATENCY_CASE = (100, 1)
"""The latency plot shows one case: this one when it was measured (the headline row)."""


class NoResultsError(Exception):
    """A figure's data is not there: the message says what to run."""


@dataclass(frozen=True)
class Recorded:
    """One step's recorded data and the day it was recorded."""

    step: str
    data: dict[str, Any]
    day: str


@dataclass(frozen=True)
class PublishRow:
    """One case and system of ``bench.publish``."""

    system: str
    size: int
    topics: int
    msgs_per_s: float
    quantiles_ms: tuple[tuple[float, float], ...]

    @property
    def case(self) -> tuple[int, int]:
        return self.size, self.topics


def parse_publish(data: dict[str, Any]) -> list[PublishRow]:
    return [
        PublishRow(
            str(row["system"]),
            int(row["size"]),
            int(row["topics"]),
            float(row["msgs_per_s"]),
            tuple((float(q), float(ms)) for q, ms in row.get("latency_quantiles_ms") or ()),
        )
        for row in data["rows"]
    ]


def case_label(size: int, topics: int) -> str:
    """``(1024, 4)`` -> ``"1 KB x 4 topics"``."""
    amount = f"{size // 1024} KB" if size % 1024 == 0 else f"{size} B"
    return f"{amount} x {topics} topic{'s' if topics != 1 else ''}"


def _figure() -> tuple[Figure, Axes]:
    """A figure of its own (no pyplot: nothing global to close or to leak)."""
    figure = Figure(figsize=SIZE_INCHES, dpi=DPI, layout="constrained")
    return figure, figure.subplots()


def _colors() -> Colormap:
    return matplotlib.colormaps["tab10"]


def _titles(figure: Figure, axes: Axes, title: str, detail: str, day: str) -> None:
    """What is measured as the title; how, and when it was recorded, under it."""
    figure.suptitle(title, fontsize=11)
    axes.set_title(detail, loc="left", fontsize=8)
    axes.set_title(f"recorded {day}" if day else "", loc="right", fontsize=8)


def _thousands(value: float, _position: float) -> str:
    return f"{value / 1000:,.0f}k" if value >= 1000 else f"{value:,.0f}"


def _order(names: Sequence[str]) -> list[str]:
    """Distinct names in the order first seen (the order the step ran them)."""
    return list(dict.fromkeys(names))


def throughput_by_system(recorded: Recorded) -> Figure:
    """Bars per case, one per system: the saturation rate."""
    rows = parse_publish(recorded.data)
    if not rows:
        raise NoResultsError("bench.publish recorded no rows")
    cases = sorted({row.case for row in rows})
    systems = _order([row.system for row in rows])
    rate = {(row.system, row.case): row.msgs_per_s for row in rows}
    figure, axes = _figure()
    width = 0.8 / len(systems)
    colors = _colors()
    for index, system in enumerate(systems):
        xs = [c + (index - (len(systems) - 1) / 2) * width for c in range(len(cases))]
        heights = [rate.get((system, case), 0.0) for case in cases]
        axes.bar(xs, heights, width, label=system, color=colors(index % 10))
    axes.set_xticks(range(len(cases)), [case_label(*case) for case in cases])
    axes.set_ylabel("messages per second (higher is better)")
    axes.yaxis.set_major_formatter(FuncFormatter(_thousands))
    axes.grid(axis="y", alpha=0.3)
    figure.legend(loc="outside lower center", ncol=min(len(systems), 5), fontsize=8)
    messages = int(recorded.data.get("messages", 0))
    _titles(
        figure,
        axes,
        "Publish throughput at saturation by system, msgs/s",
        f"{messages:,} messages per run; Java load generators on the same machine",
        recorded.day,
    )
    return figure


LATENCY_TICKS = (0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999)


def _percentile_label(share: float) -> str:
    return f"p{100 * share:.3f}".rstrip("0").rstrip(".")


def latency_cdf(recorded: Recorded) -> Figure:
    """The distribution of publish latency at half of each system's maximum rate, per
    system, from the percentiles its load generator reported (medians over the runs)."""
    rows = [row for row in parse_publish(recorded.data) if len(_inside(row.quantiles_ms)) >= 2]
    if not rows:
        raise NoResultsError(
            "bench.publish recorded no latency percentiles (run it without --quick: they "
            "come from the fixed-rate runs)"
        )
    cases = {row.case for row in rows}
    case = PREFERRED_LATENCY_CASE if PREFERRED_LATENCY_CASE in cases else min(cases)
    figure, axes = _figure()
    colors = _colors()
    systems = _order([row.system for row in parse_publish(recorded.data)])
    highest = 0.5
    for row in rows:
        if row.case != case:
            continue
        points = _inside(row.quantiles_ms)
        highest = max(highest, points[-1][0])
        axes.plot(
            [ms for _q, ms in points],
            [q for q, _ms in points],
            marker="o",
            markersize=3,
            label=row.system,
            color=colors(systems.index(row.system) % 10),
        )
    axes.set_xscale("log")
    axes.set_yscale("logit")
    axes.set_ylim(0.4, 1 - (1 - highest) / 2)
    ticks = [tick for tick in LATENCY_TICKS if tick <= highest]
    axes.set_yticks(ticks, [_percentile_label(tick) for tick in ticks])
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _p: ""))
    axes.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    axes.set_xlabel("publish latency, ms (log scale)")
    axes.set_ylabel("share of messages at or below")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    runs = int(recorded.data.get("paced_runs", 0))
    seconds = float(recorded.data.get("paced_seconds", 0))
    _titles(
        figure,
        axes,
        f"Publish latency CDF at half of each system's maximum rate, {case_label(*case)}",
        f"percentiles the load generator reports (median of {runs} runs of {seconds:.0f} s)",
        recorded.day,
    )
    return figure


def _inside(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points a log-x, logit-y plot can show: 0 < share < 1 (the maximum is left
    out) and latency above zero."""
    return sorted((q, ms) for q, ms in points if 0 < q < 1 and ms > 0)


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def failover_pause(recorded: Recorded) -> Figure:
    """Per fault kind, each failover figure (both clients' topics together): bar p50,
    whisker up to p99."""
    data = recorded.data
    kinds: dict[str, dict[str, dict[str, list[float]]]] = data["kinds"]
    names = [str(name) for name in data["figures"]]
    pooled = {
        (kind, name): [float(v) for client in clients.values() for v in client.get(name, [])]
        for kind, clients in kinds.items()
        for name in names
    }
    if not any(pooled.values()):
        raise NoResultsError("bench.failover recorded no faults")
    figure, axes = _figure()
    width = 0.8 / len(names)
    colors = _colors()
    for index, name in enumerate(names):
        xs, p50s, p99s = [], [], []
        for position, kind in enumerate(kinds):
            values = pooled[(kind, name)]
            if values:
                xs.append(position + (index - (len(names) - 1) / 2) * width)
                p50s.append(statistics.median(values))
                p99s.append(_p99(values))
        axes.bar(xs, p50s, width, label=name, color=colors(index))
        axes.errorbar(
            xs,
            p50s,
            yerr=[[0.0] * len(xs), [high - low for low, high in zip(p50s, p99s, strict=True)]],
            fmt="none",
            ecolor="black",
            capsize=3,
            linewidth=1,
        )
    axes.set_xticks(range(len(kinds)), list(kinds))
    axes.set_xlabel("fault, on one of 3 brokers")
    axes.set_ylabel("seconds (bar: p50, whisker: p99)")
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=8)
    _titles(
        figure,
        axes,
        "Broker failover: time until every topic is back, and the longest pause, s",
        f"{int(data.get('faults', 0))} faults per kind; Python and Java clients, "
        f"{int(data.get('topics_per_client', 0))} topics each at 10 msgs/s",
        recorded.day,
    )
    return figure


def memory_label(label: str, count: int, subscription: bool) -> str:
    """A row of ``bench.memory``'s table as the item its bytes are per."""
    if label == "idle topics":
        item = "idle topic" + (" with a subscription" if subscription else "")
    elif label.startswith("connected "):
        item = f"{label.removeprefix('connected ')}\nconnected to a topic"
    elif label == "PIP-6 producers":
        item = "remembered PIP-6 producer"
    else:
        item = label
    return f"{item}\n({count:,} of them)"


def memory_per_topic(recorded: Recorded) -> Figure:
    """The broker's RSS growth per item of each row of ``bench.memory``'s table."""
    data = recorded.data
    rows = [
        (str(row["label"]), float(row["bytes_each"]), int(row["count"])) for row in data["rows"]
    ]
    if not rows:
        raise NoResultsError("bench.memory recorded no rows")
    figure, axes = _figure()
    subscription = bool(data.get("subscription"))
    labels = [memory_label(label, count, subscription) for label, _each, count in rows]
    positions = list(range(len(rows)))[::-1]
    values = [each for _label, each, _count in rows]
    bars = axes.barh(positions, values, color=_colors()(0), height=0.6)
    axes.bar_label(bars, [f"{value:,.0f} B" for value in values], padding=3, fontsize=8)
    axes.set_yticks(positions, labels, fontsize=8)
    axes.set_xlabel("broker resident memory (RSS) growth per item, bytes")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    axes.set_xlim(0, max([*values, 1.0]) * 1.2)
    axes.grid(axis="x", alpha=0.3)
    traced = " (tracemalloc on: traces included)" if data.get("tracemalloc") else ""
    _titles(
        figure,
        axes,
        "Broker memory per idle topic and per remembered producer, bytes",
        f"(RSS after - RSS before) / count, one broker, PIP-6 deduplication on{traced}",
        recorded.day,
    )
    return figure


NODE_LOSS_GROUPS = {"led": "the killed node led\nits partitions", "not led": "other topics"}


def node_loss_pause(recorded: Recorded) -> Figure:
    """Every pause (one per topic and kill) per system and group: a box and the points."""
    data = recorded.data
    systems: dict[str, dict[str, list[float]]] = data["systems"]
    columns = [
        (system, f"{system}\n{NODE_LOSS_GROUPS.get(group, group)}", [float(v) for v in values])
        for system, groups in systems.items()
        for group, values in groups.items()
        if values
    ]
    if not columns:
        raise NoResultsError("bench.node_loss recorded no pauses")
    figure, axes = _figure()
    colors = _colors()
    system_names = list(systems)
    jitter = random.Random(0)
    for position, (system, _label, values) in enumerate(columns):
        color = colors(system_names.index(system) % 10)
        axes.boxplot(
            [values],
            positions=[position],
            widths=0.5,
            showfliers=False,
            medianprops={"color": color},
        )
        axes.scatter(
            [position + jitter.uniform(-0.15, 0.15) for _ in values],
            values,
            s=14,
            alpha=0.6,
            color=color,
            zorder=3,
        )
    axes.set_xticks(range(len(columns)), [label for _system, label, _values in columns], fontsize=8)
    axes.set_xlim(-0.6, len(columns) - 0.4)
    axes.set_ylim(bottom=0)
    axes.set_ylabel("pause, s (longest time without an acknowledgement)")
    axes.grid(axis="y", alpha=0.3)
    _titles(
        figure,
        axes,
        "Publish pause when a Kafka node is killed (kill -9): direct Kafka vs broker, s",
        f"{int(data.get('kills', 0))} kills of 3 nodes; {int(data.get('topics', 0))} topics at "
        f"{int(data.get('rate_per_topic', 0))} msgs/s; one point per topic and kill",
        recorded.day,
    )
    return figure


@dataclass(frozen=True)
class Plot:
    """One PNG: the step it is drawn from and how."""

    file: str
    step: str
    draw: Callable[[Recorded], Figure]


PLOTS = (
    Plot("throughput-by-system.png", "bench.publish", throughput_by_system),
    Plot("latency-cdf.png", "bench.publish", latency_cdf),
    Plot("failover-pause.png", "bench.failover", failover_pause),
    Plot("memory-per-topic.png", "bench.memory", memory_per_topic),
    Plot("node-loss-pause.png", "bench.node_loss", node_loss_pause),
)


def draw(plot: Plot, source: Path, out: Path) -> Path:
    """Draws one PNG from ``source``'s results; raises NoResultsError when they are not there."""
    data = results.load(plot.step, source)
    if data is None:
        raise NoResultsError(f"no results of {plot.step} in {source} (run: python -m {plot.step})")
    when = results.recorded_at(plot.step, source) or ""
    figure = plot.draw(Recorded(plot.step, data, when[:10]))
    out.mkdir(parents=True, exist_ok=True)
    target = out / plot.file
    figure.savefig(target, dpi=DPI, metadata={"Software": None})
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__)
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help=f"where the steps recorded (default: ${results.ENV} or build/bench-results)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: docs/images")
    args = parser.parse_args(argv)
    source: Path = args.results or results.results_dir()
    failed = 0
    for plot in PLOTS:
        try:
            print(f"wrote {draw(plot, source, args.out)}")
        except NoResultsError as missing:
            print(f"skipped {plot.file}: {missing}")
        except (KeyError, TypeError, ValueError) as error:  # a result file of another shape
            failed += 1
            print(f"FAILED {plot.file}: {plot.step}'s results: {error!r}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
