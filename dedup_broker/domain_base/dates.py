"""Timestamps as Pulsar's admin API writes them."""

from __future__ import annotations

import datetime


def pulsar_date(epoch_ms: int) -> str:
    """Pulsar's ``DateFormatter.format``: ISO-8601 with the offset, in UTC here
    (``2026-01-16T08:45:33.245Z``); the Go admin client reads ``connectedSince`` as a
    string and refuses a number."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
