"""Prometheus registries: one per process role (broker, deletion worker), never the global one.

Every metric is created with ``registry=`` one of these, so several brokers (or tests) in
one process keep separate metrics. Pulsar exposes no ``_created`` series and neither did
this broker before it used prometheus_client, so importing this module turns them off;
prometheus_client has only a process-wide switch for that.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)

__all__ = ["CONTENT_TYPE", "exposition", "new_registry"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Media type of ``exposition()``: the Prometheus text format 0.0.4, which Pulsar serves."""

disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated


def new_registry() -> CollectorRegistry:
    """A fresh, empty registry (one per broker or worker, one per test)."""
    return CollectorRegistry()


def exposition(registry: CollectorRegistry) -> bytes:
    """The text-format exposition of every metric in ``registry``."""
    return generate_latest(registry)
