"""The bench figures: each PNG drawn from results written the way the steps write them,
and a figure whose step recorded nothing skipped with what to run."""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from bench import failover, memory, node_loss, publish, results
from bench import plots as bench_plots
from bench.load_tools import Measurement

PNG = b"\x89PNG\r\n\x1a\n"
FILES = [plot.file for plot in bench_plots.PLOTS]


def _publish_rows() -> list[publish.Row]:
    rows = []
    for factor, system in enumerate(
        ("direct Kafka", "broker, dedup off", "broker, dedup on", "Pulsar, dedup on"), start=1
    ):
        for size, topics in ((100, 1), (1024, 1), (100, 4)):
            rate = 500_000 / factor / (1 + size / 1024) * (1 + topics / 10)
            paced = tuple(
                Measurement(
                    100_000,
                    rate / 2,
                    5.0 * factor + run,
                    15.0 * factor + run,
                    quantiles_ms=(
                        (0.5, 5.0 * factor + run),
                        (0.95, 9.0 * factor + run),
                        (0.99, 15.0 * factor + run),
                        (0.999, 40.0 * factor),
                        (1.0, 90.0 * factor),
                    ),
                )
                for run in (0, 1, 2)
            )
            saturated = Measurement(1_000_000, rate, 50.0, 200.0, server_cpu={"server": 2.0})
            rows.append(publish.Row(system, size, topics, saturated, paced, rate / 2))
    return rows


def _record_all(directory: Path) -> None:
    """Every step's results, built by the steps' own functions."""
    plan = publish.Plan(((100, 1), (1024, 1), (100, 4)), 1_000_000, 10.0, 200_000)
    results.record("bench.publish", publish.recorded(_publish_rows(), plan), directory)
    figures = {
        "back after": {("kill-9", "python"): [1.2, 1.4, 2.0], ("leave", "java"): [0.1, 0.2]},
        "longest pause in the fault": {("kill-9", "python"): [1.1, 1.3], ("leave", "java"): [0.7]},
        "longest pause in the return": {("kill-9", "java"): [0.4, 0.5], ("leave", "python"): []},
    }
    results.record(
        "bench.failover",
        failover.recorded(["kill-9", "leave", "unload"], ["python", "java"], 3, figures),
        directory,
    )
    rows = [
        ("idle topics", {"count": 10_000, "bytes_each": 9_790.0, "load_s": 120.0}),
        ("connected producer+consumer", {"count": 10_000, "bytes_each": 4_100.0, "load_s": 9.0}),
        ("PIP-6 producers", {"count": 10_000, "bytes_each": 346.0, "load_s": 30.0}),
    ]
    flags = argparse.Namespace(subscription=True, connected=True, tracemalloc=False)
    results.record("bench.memory", memory.recorded(rows, flags), directory)
    pauses = {
        "direct Kafka": {"led": [7.1, 7.0, 8.9], "not led": [0.1, 0.2, 0.1, 0.3]},
        "broker": {"led": [7.6, 17.9, 8.0], "not led": []},
    }
    results.record("bench.node_loss", node_loss.recorded(3, pauses), directory)


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's header chunk."""
    head = path.read_bytes()[:24]
    assert head.startswith(PNG)
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_every_figure_is_drawn_as_a_small_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record_all(tmp_path / "results")
    out = tmp_path / "images"
    assert bench_plots.main(["--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    for name in FILES:
        path = out / name
        assert path.read_bytes().startswith(PNG)
        assert 5_000 < path.stat().st_size < 300_000, name
        assert _png_size(path) == (800, 450)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"wrote {out / name}" for name in FILES]


def test_a_step_that_recorded_nothing_is_skipped_with_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record_all(tmp_path)
    (tmp_path / "bench.failover.json").unlink()
    (tmp_path / "bench.node_loss.json").unlink()
    out = tmp_path / "images"
    assert bench_plots.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "latency-cdf.png",
        "memory-per-topic.png",
        "throughput-by-system.png",
    ]
    skipped = [line for line in capsys.readouterr().out.splitlines() if "skipped" in line]
    assert skipped == [
        f"skipped failover-pause.png: no results of bench.failover in {tmp_path} "
        "(run: python -m bench.failover)",
        f"skipped node-loss-pause.png: no results of bench.node_loss in {tmp_path} "
        "(run: python -m bench.node_loss)",
    ]


def test_the_results_directory_defaults_to_the_environment_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(results.ENV, str(tmp_path / "nothing-here"))
    out = tmp_path / "images"
    assert bench_plots.main(["--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(FILES)
    assert all(line.startswith("skipped ") and "nothing-here" in line for line in lines)
    assert not out.exists()


def test_a_publish_run_without_fixed_rate_runs_skips_only_the_latency_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quick = [
        publish.Row(row.system, row.size, row.topics, row.saturated, (), row.paced_rate)
        for row in _publish_rows()
    ]
    plan = publish.Plan(((100, 1),), 200_000, 0.0, 50_000)
    results.record("bench.publish", publish.recorded(quick, plan), tmp_path)
    assert bench_plots.main(["--results", str(tmp_path), "--out", str(tmp_path / "i")]) == 0
    assert [p.name for p in (tmp_path / "i").iterdir()] == ["throughput-by-system.png"]
    assert "skipped latency-cdf.png: bench.publish recorded no latency percentiles" in (
        capsys.readouterr().out
    )


def test_results_of_another_shape_fail_that_figure_and_draw_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record_all(tmp_path)
    results.record("bench.memory", {"rows": [{"label": "idle topics"}]}, tmp_path)
    assert bench_plots.main(["--results", str(tmp_path), "--out", str(tmp_path / "i")]) == 1
    assert "FAILED memory-per-topic.png" in capsys.readouterr().err
    assert len(list((tmp_path / "i").iterdir())) == len(FILES) - 1


def test_labels_say_what_each_case_and_row_is() -> None:
    assert bench_plots.case_label(100, 1) == "100 B x 1 topic"
    assert bench_plots.case_label(1024, 4) == "1 KB x 4 topics"
    assert bench_plots.memory_label("idle topics", 10_000, True) == (
        "idle topic with a subscription\n(10,000 of them)"
    )
    assert bench_plots.memory_label("PIP-6 producers", 500, False) == (
        "remembered PIP-6 producer\n(500 of them)"
    )
