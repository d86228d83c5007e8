"""What a bench step measured, kept as JSON next to what it prints, so that the figures
can be drawn again (``python -m bench.plots``) without running the step again.

One file per step, ``<dir>/<step>.json``, replaced whole by each run: ``dir`` is
``BENCH_RESULTS_DIR`` when set, else ``build/bench-results`` under the repository.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ENV = "BENCH_RESULTS_DIR"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO / "build" / "bench-results"


def results_dir() -> Path:
    """Where the results go: ``BENCH_RESULTS_DIR``, else ``build/bench-results``."""
    configured = os.environ.get(ENV)
    return Path(configured) if configured else DEFAULT_DIR


def path_of(step: str, directory: Path | None = None) -> Path:
    """The file of ``step`` (``bench.publish`` -> ``bench.publish.json``)."""
    if not step or "/" in step or step.startswith("."):
        raise ValueError(f"not a step name: {step!r}")
    return (directory or results_dir()) / f"{step}.json"


def record(step: str, data: dict[str, Any], directory: Path | None = None) -> Path:
    """Write ``data`` as the results of ``step``, with the time it was recorded.

    Written to a temporary file in the same directory, then renamed over the old one: a
    run stopped halfway (or two runs at once) never leaves a half-written file for the
    plots to read."""
    target = path_of(step, directory)
    text = json.dumps(
        {
            "step": step,
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "data": data,
        },
        indent=1,
        allow_nan=False,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{step}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _envelope(step: str, directory: Path | None) -> dict[str, Any] | None:
    try:
        content = json.loads(path_of(step, directory).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if not isinstance(content, dict) or not isinstance(content.get("data"), dict):
        raise ValueError(f"{path_of(step, directory)} is not a recorded result")
    return content


def load(step: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The data ``step`` last recorded, or None when it has recorded none."""
    content = _envelope(step, directory)
    if content is None:
        return None
    data: dict[str, Any] = content["data"]
    return data


def recorded_at(step: str, directory: Path | None = None) -> str | None:
    """When ``step`` last recorded (ISO 8601, UTC), or None when it has recorded none."""
    content = _envelope(step, directory)
    when = None if content is None else content.get("recorded_at")
    return when if isinstance(when, str) else None
