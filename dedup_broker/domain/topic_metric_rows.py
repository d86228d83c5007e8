"""What Pulsar's per-topic metrics say, read from a loaded topic: one row per topic.

The numbers are the ones ``topics stats`` answers (rates of the last stats period, sizes,
backlogs, counters kept by the publish and dispatch paths); nothing here counts anything
a second time. Names, types and meanings follow Pulsar's metrics reference; the
deduplication families, which Pulsar does not have, are ``dedup_broker_*``. Pulsar's
broker-level ``pulsar_broker_*`` families are topic families summed over every topic.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dedup_broker.backlog.quota import estimated_backlog_size
from dedup_broker.domain.subscription import delayed_messages
from dedup_broker.domain.write_stats import (
    LATENCY_BOUNDS_US,
    LATENCY_NAMES,
    NO_WRITES,
    SIZE_BOUNDS,
    SIZE_NAMES,
)
from dedup_broker.domain_base.rates import SampledRates, rate

if TYPE_CHECKING:
    from dedup_broker.domain.consumer import Consumer
    from dedup_broker.domain.metered import MeteredTopic, StoredTopic

Field = tuple[str, str, str]
"""``(name as on the # TYPE line, type, help)``."""

PERIOD = "in the last stats period"

TOPIC_FIELDS: tuple[Field, ...] = (
    ("pulsar_subscriptions_count", "gauge", "Subscriptions"),
    ("pulsar_producers_count", "gauge", "Producers connected"),
    ("pulsar_consumers_count", "gauge", "Consumers connected"),
    ("pulsar_rate_in", "gauge", f"Messages published per second {PERIOD}"),
    ("pulsar_rate_out", "gauge", f"Messages dispatched per second {PERIOD}"),
    ("pulsar_throughput_in", "gauge", f"Bytes published per second {PERIOD}"),
    ("pulsar_throughput_out", "gauge", f"Bytes dispatched per second {PERIOD}"),
    (
        "pulsar_storage_size",
        "gauge",
        "Bytes of the ledgers in Kafka, times kafkaReplicationFactor when it is set",
    ),
    ("pulsar_storage_logical_size", "gauge", "Bytes of the ledgers, one copy"),
    (
        "pulsar_storage_backlog_size",
        "gauge",
        "Estimated bytes of the largest durable subscription's backlog",
    ),
    ("pulsar_storage_offloaded_size", "gauge", "Bytes of the ledgers in tiered storage"),
    ("pulsar_storage_write_rate", "gauge", f"Entries written to storage per second {PERIOD}"),
    ("pulsar_storage_read_rate", "gauge", f"Entries read from storage per second {PERIOD}"),
    ("pulsar_msg_backlog", "gauge", "Messages not yet acknowledged, summed over subscriptions"),
    ("pulsar_in_messages_total", "counter", "Messages published since the topic was loaded"),
    ("pulsar_in_bytes_total", "counter", "Bytes published since the topic was loaded"),
    *(
        (name, "gauge", f"Entries written {PERIOD} in at most {bound / 1000:g} ms")
        for name, bound in zip(LATENCY_NAMES, LATENCY_BOUNDS_US, strict=False)
    ),
    (LATENCY_NAMES[-3], "gauge", f"Entries written {PERIOD} in over 1000 ms"),
    (LATENCY_NAMES[-2], "gauge", f"Entries written {PERIOD}"),
    (LATENCY_NAMES[-1], "gauge", f"Storage write latency of the entries written {PERIOD}, µs"),
    *(
        (name, "gauge", f"Entries written {PERIOD} of at most {bound} bytes")
        for name, bound in zip(SIZE_NAMES, SIZE_BOUNDS, strict=False)
    ),
    (SIZE_NAMES[-3], "gauge", f"Entries written {PERIOD} of over {SIZE_BOUNDS[-1]} bytes"),
    (SIZE_NAMES[-2], "gauge", f"Entries written {PERIOD}"),
    (SIZE_NAMES[-1], "gauge", f"Bytes of the entries written {PERIOD}"),
)
"""Per topic, and summed per namespace."""

NAMESPACE_FIELDS: tuple[Field, ...] = (
    ("pulsar_out_messages_total", "counter", "Messages dispatched to consumers"),
    ("pulsar_out_bytes_total", "counter", "Bytes dispatched to consumers"),
    ("pulsar_subscription_delayed", "gauge", "Messages held for delayed delivery"),
)
"""Per namespace only (per topic they are per subscription, as Pulsar has them)."""

SUBSCRIPTION_FIELDS: tuple[Field, ...] = (
    ("pulsar_subscription_back_log", "gauge", "Messages not yet acknowledged"),
    (
        "pulsar_subscription_back_log_no_delayed",
        "gauge",
        "Messages not yet acknowledged, those held for delayed delivery aside",
    ),
    ("pulsar_subscription_delayed", "gauge", "Messages held for delayed delivery"),
    (
        "pulsar_subscription_unacked_messages",
        "gauge",
        "Messages delivered to consumers and not yet acknowledged",
    ),
    ("pulsar_subscription_msg_rate_out", "gauge", f"Messages dispatched per second {PERIOD}"),
    ("pulsar_subscription_msg_throughput_out", "gauge", f"Bytes dispatched per second {PERIOD}"),
    (
        "pulsar_subscription_msg_rate_redeliver",
        "gauge",
        f"Messages redelivered per second {PERIOD}",
    ),
    ("pulsar_subscription_consumers_count", "gauge", "Consumers connected"),
    ("pulsar_out_messages_total", "counter", "Messages dispatched to the subscription's consumers"),
    ("pulsar_out_bytes_total", "counter", "Bytes dispatched to the subscription's consumers"),
    (
        "pulsar_subscription_msg_ack_rate",
        "gauge",
        f"Messages acknowledged per second {PERIOD} (a batch counts each of its messages)",
    ),
)

DEDUP_FIELDS: tuple[Field, ...] = (
    (
        "dedup_broker_deduplication_producers",
        "gauge",
        "Producers whose sequence ids deduplication (PIP-6) tracks",
    ),
    (
        "dedup_broker_deduplication_entries_since_snapshot",
        "gauge",
        "Entries persisted since the last deduplication snapshot",
    ),
    (
        "dedup_broker_deduplication_last_snapshot_timestamp_seconds",
        "gauge",
        "When the last deduplication snapshot was stored (0: none yet); per namespace the oldest",
    ),
    (
        "dedup_broker_deduplication_snapshots_total",
        "counter",
        "Deduplication snapshots stored in the background (each entries or time interval)",
    ),
    (
        "dedup_broker_deduplication_snapshot_failures_total",
        "counter",
        "Deduplication snapshots that failed (retried with the next entries or tick)",
    ),
)
"""Topics with deduplication on only."""
OLDEST = 2
"""The dedup field a namespace takes the minimum of, not the sum."""

VERDICTS: Field = (
    "dedup_broker_deduplication_verdicts_total",
    "counter",
    "Deduplication verdicts on SEND but NotDup: Dup, PartlyDup (a batch stored in part, "
    "its new messages written), and Unknown each time a SEND waiting for its earlier "
    "copy asks again",
)

TOPICS_COUNT: Field = ("pulsar_topics_count", "gauge", "Topics loaded, per namespace")

BROKER_TOPICS_COUNT: Field = ("pulsar_broker_topics_count", "gauge", "Topics loaded")
_BROKER_SUMS: tuple[tuple[str, str], ...] = (
    ("pulsar_subscriptions_count", "Subscriptions of the loaded topics"),
    ("pulsar_producers_count", "Producers connected"),
    ("pulsar_consumers_count", "Consumers connected"),
    ("pulsar_rate_in", f"Messages published per second {PERIOD}, all topics"),
    ("pulsar_rate_out", f"Messages dispatched per second {PERIOD}, all topics"),
    ("pulsar_throughput_in", f"Bytes published per second {PERIOD}, all topics"),
    ("pulsar_throughput_out", f"Bytes dispatched per second {PERIOD}, all topics"),
    (
        "pulsar_storage_size",
        "Bytes of the ledgers in Kafka, times kafkaReplicationFactor when it is set, all topics",
    ),
    ("pulsar_storage_logical_size", "Bytes of the ledgers, one copy, all topics"),
    ("pulsar_storage_write_rate", f"Entries written to storage per second {PERIOD}, all topics"),
    ("pulsar_storage_read_rate", f"Entries read from storage per second {PERIOD}, all topics"),
    ("pulsar_msg_backlog", "Messages not yet acknowledged, summed over all subscriptions"),
)
_TOPIC_INDEX = {name: index for index, (name, _, _) in enumerate(TOPIC_FIELDS)}
BROKER_FIELDS: tuple[tuple[Field, int], ...] = tuple(
    ((name.replace("pulsar_", "pulsar_broker_", 1), "gauge", meaning), _TOPIC_INDEX[name])
    for name, meaning in _BROKER_SUMS
)
"""Pulsar's ``pulsar_broker_*`` (label ``cluster``), each with the index of the topic
field it sums, in Pulsar's order (after ``BROKER_TOPICS_COUNT``)."""


class Rated(Protocol):
    @property
    def rates(self) -> SampledRates | None: ...


def _sums(meters: Iterable[Rated], width: int) -> list[float]:
    totals = [0.0] * width
    for meter in meters:
        rates = meter.rates
        if rates is not None:
            for index in range(width):
                totals[index] += rate(rates, index)
    return totals


@dataclass(slots=True)
class TopicRow:
    namespace: str
    topic: str
    values: list[float]
    """``TOPIC_FIELDS`` then ``NAMESPACE_FIELDS``."""
    subscriptions: list[tuple[str, list[float]]]
    """Name and ``SUBSCRIPTION_FIELDS`` of each subscription."""
    dedup: list[float] | None = None
    """``DEDUP_FIELDS`` when deduplication is on."""
    keys: list[tuple[str, ...]] | None = None
    """Label values of the topic, then of each subscription (the scrape sets them)."""
    verdicts: dict[str, int] | None = None


def subscription_values(
    backlog: int, delayed: int, consumers: Sequence[Consumer], out: tuple[int, int]
) -> list[float]:
    """``SUBSCRIPTION_FIELDS`` of one subscription."""
    sent = _sums(consumers, 4)
    unacked = sum(c.unacked_messages for c in consumers)
    return [
        backlog,
        max(0, backlog - delayed),
        delayed,
        unacked,
        sent[0],
        sent[1],
        sent[2],
        len(consumers),
        out[0],
        out[1],
        sent[3],
    ]


def persistent_row(topic: StoredTopic, replication_factor: int) -> TopicRow:
    """One persistent topic's row, read as ``topics stats`` reads it."""
    name = topic.name
    ledger = topic.managed_ledger
    total = ledger.total_size
    subscriptions: list[tuple[str, list[float]]] = []
    backlog_size = 0
    for sub_name, subscription in topic.subscriptions.items():
        backlog = subscription.backlog()
        values = subscription_values(
            backlog,
            delayed_messages(subscription),
            subscription.consumers,
            (subscription.msgs_out, subscription.bytes_out),
        )
        subscriptions.append((sub_name, values))
        if subscription.durable:
            size = estimated_backlog_size(ledger, subscription.cursor, backlog)
            backlog_size = max(backlog_size, size)
    offloaded = sum(info.size for info in ledger.ledgers() if info.offloaded)
    written_and_read = topic.storage_rates
    storage = (
        total * replication_factor,
        total,
        backlog_size,
        offloaded,
        rate(written_and_read, 0),
        rate(written_and_read, 1),
    )
    row = TopicRow(
        name.namespace_name,
        str(name),
        _common(topic.producers.values(), subscriptions, storage, (topic.msgs_in, topic.bytes_in))
        + list(topic.write_stats.period)
        + _namespace_sums(subscriptions),
        subscriptions,
    )
    dedup = topic.dedup
    if dedup.state is not None:
        stats = dedup.stats()
        row.dedup = [
            _number(stats.get("producers")),
            _number(stats.get("entriesSinceSnapshot")),
            _number(stats.get("lastSnapshotTime")) / 1000,
            _number(stats.get("snapshotsTaken")),
            _number(stats.get("snapshotFailures")),
        ]
        row.verdicts = dict(dedup.verdicts)
    return row


NO_STORAGE = (0, 0, 0, 0, 0, 0)
"""A non-persistent topic's storage sizes and rates."""


def non_persistent_row(topic: MeteredTopic) -> TopicRow:
    """A non-persistent topic: no storage, no backlog, what was published and sent."""
    subscriptions = [
        (sub_name, subscription_values(0, 0, s.consumers, (s.msgs_out, s.bytes_out)))
        for sub_name, s in topic.subscriptions.items()
    ]
    return TopicRow(
        topic.name.namespace_name,
        str(topic.name),
        _common(
            topic.producers.values(), subscriptions, NO_STORAGE, (topic.msgs_in, topic.bytes_in)
        )
        + list(NO_WRITES)
        + _namespace_sums(subscriptions),
        subscriptions,
    )


def _common(
    producers: Collection[Rated],
    subscriptions: list[tuple[str, list[float]]],
    storage: tuple[float, ...],
    published: tuple[int, int],
) -> list[float]:
    """The topic fields up to the write buckets (``storage``: sizes, then rates)."""
    received = _sums(producers, 2)
    consumers = rate_out = throughput_out = backlog = 0.0
    for _, values in subscriptions:
        backlog += values[0]
        rate_out += values[4]
        throughput_out += values[5]
        consumers += values[7]
    return [
        len(subscriptions),
        len(producers),
        consumers,
        received[0],
        rate_out,
        received[1],
        throughput_out,
        *storage,
        backlog,
        *published,
    ]


def _namespace_sums(subscriptions: list[tuple[str, list[float]]]) -> list[float]:
    out_msgs = out_bytes = delayed = 0.0
    for _, values in subscriptions:
        delayed += values[2]
        out_msgs += values[8]
        out_bytes += values[9]
    return [out_msgs, out_bytes, delayed]


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
