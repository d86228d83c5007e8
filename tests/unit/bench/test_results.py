"""Bench results: what a step records is what the plots read back, and a file is never
seen half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import results


def test_a_recorded_step_loads_back_with_when_it_was_recorded(tmp_path: Path) -> None:
    data = {"rows": [{"system": "broker, dedup on", "msgs_per_s": 396_983.5}], "kills": 3}
    written = results.record("bench.publish", data, tmp_path)
    assert written == tmp_path / "bench.publish.json"
    assert results.load("bench.publish", tmp_path) == data
    when = results.recorded_at("bench.publish", tmp_path)
    assert when is not None and when[:2] == "20"


def test_a_step_that_recorded_nothing_loads_as_none(tmp_path: Path) -> None:
    assert results.load("bench.failover", tmp_path) is None
    assert results.recorded_at("bench.failover", tmp_path) is None


def test_the_directory_is_the_environment_s_else_build_under_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(results.ENV, raising=False)
    assert results.results_dir() == results.REPO / "build" / "bench-results"
    monkeypatch.setenv(results.ENV, str(tmp_path / "elsewhere"))
    results.record("bench.memory", {"rows": []})
    assert (tmp_path / "elsewhere" / "bench.memory.json").exists()
    assert results.load("bench.memory") == {"rows": []}


def test_the_file_is_replaced_whole_by_a_rename_of_a_complete_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results.record("bench.node_loss", {"kills": 1}, tmp_path)
    seen: list[tuple[str, str]] = []
    replace = os.replace

    def watched(source: str, target: str) -> None:
        # At the rename: the new file is complete, next to the target, and the target
        # still holds the previous run's results.
        assert Path(source).parent == tmp_path
        assert json.loads(Path(source).read_text())["data"] == {"kills": 2}
        seen.append((source, Path(target).read_text()))
        replace(source, target)

    monkeypatch.setattr(os, "replace", watched)
    results.record("bench.node_loss", {"kills": 2}, tmp_path)
    assert len(seen) == 1 and json.loads(seen[0][1])["data"] == {"kills": 1}
    assert results.load("bench.node_loss", tmp_path) == {"kills": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.node_loss.json"]


def test_a_failed_write_keeps_the_previous_results_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results.record("bench.failover", {"faults": 20}, tmp_path)

    def interrupted(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(OSError, match="disk full"):
        results.record("bench.failover", {"faults": 21}, tmp_path)
    assert results.load("bench.failover", tmp_path) == {"faults": 20}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.failover.json"]


def test_data_json_cannot_hold_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        results.record("bench.publish", {"msgs_per_s": float("nan")}, tmp_path)
    with pytest.raises(ValueError):
        results.record("../escape", {}, tmp_path)
    assert list(tmp_path.iterdir()) == []
