"""Counters of a ``prometheus_client`` registry served by a broker :class:`Registry`.

Feature packages count with ``prometheus_client``; the broker's ``/metrics`` renders its
own :class:`Registry`. :func:`show_counters` puts each counter of the former into the
latter, read live at every scrape, with the same lines as a native counter.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry

from dedup_broker.admin.metrics import Counter, Registry, escape_label_value, format_value


class _CollectedCounter(Counter):
    """One counter family of a ``prometheus_client`` registry, read when scraped."""

    def __init__(self, source: CollectorRegistry, family: str, documentation: str) -> None:
        super().__init__(family + "_total", documentation)
        self._source = source
        self._family = family

    def samples(self) -> Iterator[str]:
        for metric in self._source.collect():
            if metric.name != self._family:
                continue
            for sample in metric.samples:
                if sample.name != self.name:
                    continue  # e.g. the ``_created`` timestamps
                pairs = ",".join(
                    f'{name}="{escape_label_value(value)}"' for name, value in sample.labels.items()
                )
                labels = "{" + pairs + "}" if pairs else ""
                yield f"{self.name}{labels} {format_value(sample.value)}"


def show_counters(source: CollectorRegistry, registry: Registry) -> None:
    """Serve every counter ``source`` holds now on ``registry``."""
    for metric in source.collect():
        if metric.type == "counter":
            registry.register(_CollectedCounter(source, metric.name, metric.documentation))
