"""A minimal Prometheus client: counters, gauges and histograms in text format 0.0.4.

Counters and histograms are updated once per message on the publish and dispatch paths,
so an update is a dictionary lookup (for labelled metrics) plus an addition: no locks,
because every update happens on the event loop thread. Code running on another thread
(for example a Kafka delivery callback) must hop to the loop first
(``loop.call_soon_threadsafe``). Hot paths should keep the child returned by
``labels(...)`` rather than look it up per message.

Nothing here is global: each broker (and each test) builds its own ``Registry``.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "new_registry",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of ``Registry.render()`` output, for the ``/metrics`` response."""

DEFAULT_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds in seconds, spanning a fast local publish (0.5 ms) to a stalled one (10 s)."""

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelValues = tuple[str, ...]


def format_value(value: float) -> str:
    """A sample value as Prometheus parses it; whole numbers without a trailing ``.0``."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}`` or the empty string when there are no labels."""
    if not names:
        return ""
    pairs = ",".join(
        f'{name}="{escape_label_value(value)}"' for name, value in zip(names, values, strict=True)
    )
    return "{" + pairs + "}"


class CounterChild:
    """One time series of a counter."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"a counter cannot decrease (inc by {amount})")
        self.value += amount


class GaugeChild:
    """One time series of a gauge: set directly, or computed when scraped."""

    __slots__ = ("_function", "value")

    def __init__(self) -> None:
        self.value: float = 0
        self._function: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount

    def set_function(self, function: Callable[[], float] | None) -> None:
        """Compute the value at scrape time (e.g. a backlog); None returns to ``set``."""
        self._function = function

    def read(self) -> float:
        return self.value if self._function is None else self._function()


class HistogramChild:
    """One time series of a histogram; per-bucket counts, made cumulative when rendered."""

    __slots__ = ("_bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum: float = 0
        self.count = 0

    def observe(self, value: float) -> None:
        # The first bound >= value: Prometheus' "le" is an inclusive upper bound.
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value
        self.count += 1


ChildT = TypeVar("ChildT", CounterChild, GaugeChild, HistogramChild)


class _Metric(Generic[ChildT]):
    """Shared label handling: children are created on first use and cached."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> None:
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        names = tuple(labelnames)
        for label in names:
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for {name}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate label names for {name}: {names}")
        self.name = name
        self.documentation = documentation
        self.labelnames = names
        self._children: dict[LabelValues, ChildT] = {}
        # An unlabelled metric is its own single child, under the empty key.
        self._own: ChildT | None = None
        if not names:
            self._own = self._children[()] = self._new_child()

    def _new_child(self) -> ChildT:
        raise NotImplementedError

    def _key(self, values: tuple[object, ...], named: dict[str, object]) -> LabelValues:
        if named:
            if values or len(named) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {named}")
            try:
                return tuple([str(named[n]) for n in self.labelnames])
            except KeyError:
                raise ValueError(
                    f"{self.name} takes labels {self.labelnames}, got {tuple(named)}"
                ) from None
        if len(values) != len(self.labelnames) or not values:
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        return tuple([str(v) for v in values])

    def labels(self, *values: object, **named: object) -> ChildT:
        """The child for these label values (positional, or by name), created on first use."""
        key = self._key(values, named)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def remove(self, *values: object, **named: object) -> None:
        """Forget one time series (e.g. when a topic is unloaded); absent ones are ignored."""
        self._children.pop(self._key(values, named), None)

    def clear(self) -> None:
        """Forget every labelled time series."""
        if self.labelnames:
            self._children.clear()

    def _unlabelled(self) -> ChildT:
        if self._own is None:
            raise ValueError(f"{self.name} has labels {self.labelnames}: use .labels(...)")
        return self._own

    def samples(self) -> Iterator[str]:
        """The sample lines of this metric, without HELP and TYPE."""
        raise NotImplementedError


class Counter(_Metric[CounterChild]):
    """A value that only goes up (messages, bytes, errors); name it ``..._total``."""

    kind = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1) -> None:
        self._unlabelled().inc(amount)

    @property
    def value(self) -> float:
        return self._unlabelled().value

    def samples(self) -> Iterator[str]:
        for key, child in list(self._children.items()):
            labels = _label_text(self.labelnames, key)
            yield f"{self.name}{labels} {format_value(child.value)}"


class Gauge(_Metric[GaugeChild]):
    """A value that goes up and down, set directly or computed at scrape time."""

    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def set(self, value: float) -> None:
        self._unlabelled().set(value)

    def inc(self, amount: float = 1) -> None:
        self._unlabelled().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._unlabelled().dec(amount)

    def set_function(self, function: Callable[[], float] | None) -> None:
        self._unlabelled().set_function(function)

    @property
    def value(self) -> float:
        return self._unlabelled().read()

    def samples(self) -> Iterator[str]:
        for key, child in list(self._children.items()):
            try:
                value = child.read()
            except Exception:
                # One broken callback must not take the whole scrape down.
                log.exception("gauge %s%s callback failed", self.name, key)
                continue
            labels = _label_text(self.labelnames, key)
            yield f"{self.name}{labels} {format_value(value)}"


class Histogram(_Metric[HistogramChild]):
    """Observations counted into fixed buckets (latencies, sizes)."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds and bounds[-1] == math.inf:
            bounds.pop()
        if not bounds or any(math.isnan(b) for b in bounds):
            raise ValueError(f"histogram {name} needs at least one finite bucket bound")
        if any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"histogram {name} bucket bounds must increase: {bounds}")
        self.bounds = (*bounds, math.inf)
        self._le = tuple(format_value(b) for b in self.bounds)
        if "le" in tuple(labelnames):
            raise ValueError(f"histogram {name} cannot use the label name 'le'")
        super().__init__(name, documentation, labelnames)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def observe(self, value: float) -> None:
        self._unlabelled().observe(value)

    def samples(self) -> Iterator[str]:
        names = (*self.labelnames, "le")
        for key, child in list(self._children.items()):
            cumulative = 0
            for le, count in zip(self._le, list(child.counts), strict=True):
                cumulative += count
                labels = _label_text(names, (*key, le))
                yield f"{self.name}_bucket{labels} {cumulative}"
            labels = _label_text(self.labelnames, key)
            yield f"{self.name}_sum{labels} {format_value(child.sum)}"
            yield f"{self.name}_count{labels} {child.count}"


AnyMetric = Counter | Gauge | Histogram


class Registry:
    """The metrics one broker exposes, rendered in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[str, AnyMetric] = {}

    def register(self, metric: AnyMetric) -> None:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is already registered")
        self._metrics[metric.name] = metric

    def unregister(self, metric: AnyMetric) -> None:
        if self._metrics.get(metric.name) is metric:
            del self._metrics[metric.name]

    def counter(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> Counter:
        metric = Counter(name, documentation, labelnames)
        self.register(metric)
        return metric

    def gauge(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> Gauge:
        metric = Gauge(name, documentation, labelnames)
        self.register(metric)
        return metric

    def histogram(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        metric = Histogram(name, documentation, labelnames, buckets)
        self.register(metric)
        return metric

    def get(self, name: str) -> AnyMetric | None:
        return self._metrics.get(name)

    def render(self) -> str:
        """The exposition text (format 0.0.4) of every registered metric."""
        lines: list[str] = []
        for metric in list(self._metrics.values()):
            lines.append(f"# HELP {metric.name} {_escape_help(metric.documentation)}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            lines.extend(metric.samples())
        return "\n".join(lines) + "\n" if lines else ""


def new_registry() -> Registry:
    """A fresh, empty registry (one per broker, one per test)."""
    return Registry()
