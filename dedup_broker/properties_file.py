"""Pulsar's ``key=value`` configuration files (``broker.conf``, ``standalone.conf``),
read as text: what the keys mean is the configuration's business."""

from __future__ import annotations

from pathlib import Path

from dedup_broker.errors import ConfigError


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Pulsar-style ``broker.conf``: ``key=value`` lines, ``#`` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}") from exc
    result: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        key, _, value = line.partition("=")
        result[key.strip()] = value.strip()
    return result
