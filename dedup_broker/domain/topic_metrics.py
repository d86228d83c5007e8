"""Pulsar's per-topic metric families, labelled ``cluster``, ``namespace``, ``topic`` (and
``subscription``), or summed per namespace with ``exposeTopicLevelMetricsInPrometheus=false``;
and Pulsar's ``pulsar_broker_*`` families, the topic families summed over the broker
(labelled ``cluster``, either way), from the columns the topic families were made of.

Read from the loaded topics when scraped. A broker may serve 10,000 topics, whose
families run to hundreds of thousands of lines, so ``render`` builds them a slice at a
time and lets the event loop serve clients between slices (no slice runs longer than
``SLICE_SECONDS``); ``collect`` gives the same families to prometheus_client in one go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dedup_broker.domain.topic_metric_rows import (
    BROKER_FIELDS,
    BROKER_TOPICS_COUNT,
    DEDUP_FIELDS,
    NAMESPACE_FIELDS,
    OLDEST,
    SUBSCRIPTION_FIELDS,
    TOPIC_FIELDS,
    TOPICS_COUNT,
    VERDICTS,
    Field,
    TopicRow,
    non_persistent_row,
    persistent_row,
)
from dedup_broker.metrics_registry import SlicedCollector, family_header

if TYPE_CHECKING:
    from dedup_broker.config import BrokerConfig
    from dedup_broker.domain.metered import MeteredTopic, StoredTopic

SLICE_SECONDS = 0.002
"""Longest the scrape holds the event loop before letting it serve again."""
REST_SECONDS = 0.001
"""How long the loop then serves others alone: a client's request takes several turns of
the loop, and it gets several in this time instead of one turn per slice."""
_CHECK_EVERY = 32
"""Topics read between two looks at the clock."""
_CHUNK = 1024
"""Lines formatted between two looks at the clock."""
_LABEL_CHUNK = 256
"""Label texts made between two looks at the clock (each costs a few lines)."""

TOPIC_LABELS = ("cluster", "namespace", "topic")
SUBSCRIPTION_LABELS = (*TOPIC_LABELS, "subscription")
NAMESPACE_LABELS = ("cluster", "namespace")
BROKER_LABELS = ("cluster",)
_ROLLED_UP = frozenset(index for _, index in BROKER_FIELDS)
"""Topic fields a broker family sums."""


@dataclass(frozen=True, slots=True)
class Table:
    """One family's samples: label values and values, side by side. Families over the
    same series share one ``keys`` list (its label texts are made once per scrape)."""

    field: Field
    labels: tuple[str, ...]
    keys: list[tuple[str, ...]]
    values: list[float]


class _Slicer:
    """Tells when the running slice is over; ``pause`` then lets the loop run."""

    __slots__ = ("_started",)

    def __init__(self) -> None:
        self._started = time.perf_counter()

    async def pause(self) -> None:
        if time.perf_counter() - self._started >= SLICE_SECONDS:
            await asyncio.sleep(REST_SECONDS)
            self._started = time.perf_counter()


def _label_text(names: tuple[str, ...], values: Iterable[str]) -> str:
    """``{name="value",...} `` as the text format writes labels (escaped where needed)."""
    pairs = []
    for name, value in zip(names, values, strict=True):
        if "\\" in value or '"' in value or "\n" in value:
            value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        pairs.append(f'{name}="{value}"')
    return "{" + ",".join(pairs) + "} "


class TopicMetrics(SlicedCollector):
    """The families of the loaded topics (``topics``: persistent, ``non_persistent``)."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: Callable[[], Collection[StoredTopic]],
        non_persistent: Callable[[], Collection[MeteredTopic]] = lambda: (),
    ) -> None:
        self.cluster = config.cluster_name
        self.per_topic = config.expose_topic_level_metrics_in_prometheus
        self._replication = max(config.kafka_replication_factor, 1)
        self._topics = topics
        self._non_persistent = non_persistent

    # --- rows -------------------------------------------------------------------------
    def rows(self) -> list[TopicRow]:
        """Every loaded topic's row, in one go."""
        replication = self._replication
        return [
            *(self._keyed(persistent_row(t, replication)) for t in self._topics()),
            *(self._keyed(non_persistent_row(t)) for t in self._non_persistent()),
        ]

    def _keyed(self, row: TopicRow) -> TopicRow:
        """The row with its label values (made here, a slice at a time)."""
        topic = (self.cluster, row.namespace, row.topic)
        row.keys = [topic, *((*topic, name) for name, _ in row.subscriptions)]
        return row

    async def rows_sliced(self) -> list[TopicRow]:
        """Every loaded topic's row, the loop serving between slices (topics that come or
        go meanwhile are in the next scrape)."""
        slicer = _Slicer()
        rows: list[TopicRow] = []
        replication = self._replication
        for index, topic in enumerate(list(self._topics())):
            rows.append(self._keyed(persistent_row(topic, replication)))
            if index % _CHECK_EVERY == 0:
                await slicer.pause()
        for index, other in enumerate(list(self._non_persistent())):
            rows.append(self._keyed(non_persistent_row(other)))
            if index % _CHECK_EVERY == 0:
                await slicer.pause()
        return rows

    # --- the families -----------------------------------------------------------------
    def _tables(self, rows: list[TopicRow]) -> Iterator[Table]:
        """Each family of ``rows``, per topic and subscription or per namespace, then the
        broker's sums."""
        cluster = self.cluster
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.namespace] = counts.get(row.namespace, 0) + 1
        namespaces: list[tuple[str, ...]] = [(cluster, ns) for ns in counts]
        yield Table(TOPICS_COUNT, NAMESPACE_LABELS, namespaces, list(counts.values()))
        totals = [0.0] * len(TOPIC_FIELDS)
        if self.per_topic:
            yield from self._topic_tables(rows, totals)
        else:
            yield from self._namespace_tables(rows, totals)
        broker: list[tuple[str, ...]] = [(cluster,)]
        yield Table(BROKER_TOPICS_COUNT, BROKER_LABELS, broker, [len(rows)])
        for field, index in BROKER_FIELDS:
            yield Table(field, BROKER_LABELS, broker, [totals[index]])

    def _topic_tables(self, rows: list[TopicRow], totals: list[float]) -> Iterator[Table]:
        """The families per topic and subscription; ``totals`` gets the sums of the topic
        columns the broker families show (summed as each column is made)."""
        keys = [r.keys[0] for r in rows if r.keys]
        for index, field in enumerate(TOPIC_FIELDS):
            column = [r.values[index] for r in rows]
            if index in _ROLLED_UP:
                totals[index] = sum(column)
            yield Table(field, TOPIC_LABELS, keys, column)
        subscription_keys = [k for r in rows if r.keys for k in r.keys[1:]]
        subscriptions = [values for r in rows for _, values in r.subscriptions]
        for index, field in enumerate(SUBSCRIPTION_FIELDS):
            column = [v[index] for v in subscriptions]
            yield Table(field, SUBSCRIPTION_LABELS, subscription_keys, column)
        deduplicated = [
            (k, r.dedup, r.verdicts or {}) for k, r in zip(keys, rows, strict=True) if r.dedup
        ]
        dedup_keys = [k for k, _, _ in deduplicated]
        for index, field in enumerate(DEDUP_FIELDS):
            yield Table(field, TOPIC_LABELS, dedup_keys, [d[index] for _, d, _ in deduplicated])
        verdicts = [((*k, v), n) for k, _, given in deduplicated for v, n in sorted(given.items())]
        yield Table(
            VERDICTS, (*TOPIC_LABELS, "verdict"), [k for k, _ in verdicts], [n for _, n in verdicts]
        )

    def _namespace_tables(self, rows: list[TopicRow], totals: list[float]) -> Iterator[Table]:
        """The topic families summed per namespace (the oldest snapshot time: its minimum);
        ``totals`` gets the namespaces' sums of the columns the broker families show."""
        cluster = self.cluster
        sums: dict[str, list[float]] = {}
        dedup: dict[str, list[float]] = {}
        verdicts: dict[tuple[str, str, str], float] = {}
        for row in rows:
            total = sums.get(row.namespace)
            if total is None:
                sums[row.namespace] = list(row.values)
            else:
                for index, value in enumerate(row.values):
                    total[index] += value
            if row.dedup is not None:
                _fold_dedup(dedup, row.namespace, row.dedup)
                for verdict, n in (row.verdicts or {}).items():
                    key = (cluster, row.namespace, verdict)
                    verdicts[key] = verdicts.get(key, 0) + n
        keys: list[tuple[str, ...]] = [(cluster, ns) for ns in sums]
        for index, field in enumerate((*TOPIC_FIELDS, *NAMESPACE_FIELDS)):
            column = [v[index] for v in sums.values()]
            if index in _ROLLED_UP:
                totals[index] = sum(column)
            yield Table(field, NAMESPACE_LABELS, keys, column)
        dedup_keys: list[tuple[str, ...]] = [(cluster, ns) for ns in dedup]
        for index, field in enumerate(DEDUP_FIELDS):
            yield Table(field, NAMESPACE_LABELS, dedup_keys, [v[index] for v in dedup.values()])
        given = sorted(verdicts.items())
        yield Table(
            VERDICTS, (*NAMESPACE_LABELS, "verdict"), [k for k, _ in given], [n for _, n in given]
        )

    # --- prometheus_client --------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        for table in self._tables(self.rows()):
            name, kind, documentation = table.field
            family = _family(name, kind, documentation, table.labels)
            for key, value in zip(table.keys, table.values, strict=True):
                family.add_metric(list(key), value)
            yield family

    def describe(self) -> Iterator[Metric]:
        for table in self._tables([]):
            yield _family(*table.field, table.labels)

    # --- /metrics -------------------------------------------------------------------------
    async def render(self) -> AsyncIterator[bytes]:
        """The exposition text, built and handed out a slice at a time."""
        rows = await self.rows_sliced()
        slicer = _Slicer()
        texts: dict[int, tuple[list[tuple[str, ...]], list[str]]] = {}
        """Label texts of each ``keys`` list, by its id (kept with the list, so that the
        id is never another list's)."""
        for table in self._tables(rows):
            name, kind, documentation = table.field
            header = family_header(name, kind, documentation)
            known = texts.get(id(table.keys))
            if known is not None and known[0] is table.keys:
                labels = known[1]
            else:
                labels = []
                for start in range(0, len(table.keys), _LABEL_CHUNK):
                    chunk_keys = table.keys[start : start + _LABEL_CHUNK]
                    labels += [_label_text(table.labels, k) for k in chunk_keys]
                    await slicer.pause()
                texts[id(table.keys)] = (table.keys, labels)
            values = table.values
            for start in range(0, len(values), _CHUNK):
                end = start + _CHUNK
                chunk = zip(labels[start:end], values[start:end], strict=True)
                lines = [f"{name}{text}{value}\n" for text, value in chunk]
                yield (header + "".join(lines)).encode()
                header = ""
                await slicer.pause()
            if header:
                yield header.encode()


def _fold_dedup(into: dict[str, list[float]], namespace: str, values: list[float]) -> None:
    total = into.get(namespace)
    if total is None:
        into[namespace] = list(values)
        return
    for index, value in enumerate(values):
        total[index] = min(total[index], value) if index == OLDEST else total[index] + value


def _family(
    name: str, kind: str, documentation: str, labels: tuple[str, ...]
) -> CounterMetricFamily | GaugeMetricFamily:
    if kind == "counter":
        return CounterMetricFamily(name, documentation, labels=list(labels))
    return GaugeMetricFamily(name, documentation, labels=list(labels))
