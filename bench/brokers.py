"""A broker process of its own for one benchmark: its own cluster name and log directory."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

from harness.broker_process import BrokerProcess


def bench_broker(bootstrap: str, kind: str, **settings: Any) -> BrokerProcess:
    """A (not yet started) broker on ``bootstrap``, named ``bench-{kind}-...``."""
    return BrokerProcess(
        bootstrap,
        cluster_name=f"bench-{kind}-{uuid.uuid4().hex[:6]}",
        settings=settings,
        log_dir=Path(tempfile.mkdtemp(prefix=f"bench-{kind}-")),
    )
