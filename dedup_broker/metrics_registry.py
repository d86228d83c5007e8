"""Prometheus registries: one per process role (broker, deletion worker), never the global one.

Every metric is created with ``registry=`` one of these, so several brokers (or tests) in
one process keep separate metrics. Pulsar exposes no ``_created`` series and neither did
this broker before it used prometheus_client, so importing this module turns them off;
prometheus_client has only a process-wide switch for that.

A broker with 10,000 topics exposes hundreds of thousands of per-topic samples, more than
one turn of the event loop may spend on. Such a collector is a ``SlicedCollector``: the
``/metrics`` route streams it (``exposition_chunks``), a slice at a time with the loop
serving clients in between, while ``collect`` keeps it an ordinary collector (tests and
docs/metrics.md read it through prometheus_client).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "FamilyInfo",
    "MetricsRegistry",
    "SlicedCollector",
    "exposition",
    "exposition_chunks",
    "families_of",
    "family_header",
    "new_registry",
    "render_exposition",
]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Media type of ``exposition()``: the Prometheus text format 0.0.4, which Pulsar serves."""

disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated


class SlicedCollector(Collector, abc.ABC):
    """A collector whose exposition is built in slices (``render``), yielding to the
    event loop between them; ``collect`` gives the same families in one go."""

    @abc.abstractmethod
    def collect(self) -> Iterable[Metric]: ...

    @abc.abstractmethod
    def render(self) -> AsyncIterator[bytes]:
        """The text-format exposition of this collector's families, piece by piece."""


class _Collectors:
    """Some collectors as one (what ``generate_latest`` reads)."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterable[Metric]:
        for collector in list(self._collectors):
            yield from collector.collect()


class MetricsRegistry(CollectorRegistry):
    """A registry that knows its collectors (for the reference docs) and which of them
    render in slices."""

    def __init__(self) -> None:
        super().__init__()
        self.collectors: list[Collector] = []
        """Every registered collector, in registration order."""

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self.collectors.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        self.collectors.remove(collector)

    def plain(self) -> Collector:
        """Every collector but the sliced ones."""
        return _Collectors([c for c in self.collectors if not isinstance(c, SlicedCollector)])

    def sliced(self) -> list[SlicedCollector]:
        return [c for c in self.collectors if isinstance(c, SlicedCollector)]


def new_registry() -> MetricsRegistry:
    """A fresh, empty registry (one per broker or worker, one per test)."""
    return MetricsRegistry()


def exposition(registry: CollectorRegistry) -> bytes:
    """The text-format exposition of every metric in ``registry``, in one go."""
    return generate_latest(registry)


async def exposition_chunks(registry: CollectorRegistry) -> AsyncIterator[bytes]:
    """What ``/metrics`` streams: the plain collectors at once, then each sliced one piece
    by piece (the event loop serves in between, and no copy of the whole is made)."""
    if not isinstance(registry, MetricsRegistry):
        yield generate_latest(registry)
        return
    yield generate_latest(registry.plain())
    for collector in registry.sliced():
        async for chunk in collector.render():
            yield chunk


async def render_exposition(registry: CollectorRegistry) -> bytes:
    """``exposition_chunks`` as one text."""
    return b"".join([chunk async for chunk in exposition_chunks(registry)])


def family_header(name: str, kind: str, documentation: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a family, escaped as prometheus_client does."""
    escaped = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {kind}\n"


@dataclass(frozen=True, slots=True)
class FamilyInfo:
    """A family as ``/metrics`` shows it: name on the ``# TYPE`` line, type, help, labels."""

    name: str
    kind: str
    documentation: str
    labels: tuple[str, ...]


def families_of(registry: MetricsRegistry) -> list[FamilyInfo]:
    """Every family the registry's collectors describe, with their label names.

    prometheus_client's metrics describe themselves without labels; their label names
    are their ``_labelnames``, and a custom collector's families carry theirs the same
    way (``GaugeMetricFamily(labels=...)``), so both are read from that attribute.
    """
    found: dict[str, FamilyInfo] = {}
    for collector in registry.collectors:
        hint: tuple[str, ...] = getattr(collector, "_labelnames", ())
        describe = getattr(collector, "describe", None)
        families: Iterable[Metric] = describe() if describe is not None else collector.collect()
        for family in families:
            labels: tuple[str, ...] = getattr(family, "_labelnames", ()) or hint
            name = family.name + "_total" if family.type == "counter" else family.name
            found.setdefault(name, FamilyInfo(name, family.type, family.documentation, labels))
    return sorted(found.values(), key=lambda f: f.name)
