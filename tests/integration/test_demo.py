"""The README's main command runs end to end and reports exactly-once delivery."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_reports_no_duplicates_and_nothing_missing(
    kafka_bootstrap: str, redis_url: str
) -> None:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, REDIS_URL=redis_url)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dedup_broker.cli",
            "--log-level",
            "WARNING",
            "demo",
            "--messages",
            "3000",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert "rows in:          3000" in lines
    assert "messages stored:  3000" in lines
    assert "duplicates:       0" in lines
    assert "missing:          0" in lines
