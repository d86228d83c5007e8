"""Names that cannot collide, so tests sharing one Kafka never see each other's topics."""

from __future__ import annotations

import re
import uuid

_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,80}")


def unique_name(prefix: str) -> str:
    """``<prefix>-<12 hex digits>``: valid as a Kafka topic name and as a cluster name."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"prefix must be 1-80 of [A-Za-z0-9._-], got {prefix!r}")
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
