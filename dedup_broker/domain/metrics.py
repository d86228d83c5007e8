"""The broker domain's Prometheus metrics (names follow Pulsar's ``pulsar_*`` where they
exist): the publish latency and Kafka's failed writes, counted on the hot path, and the
per-topic families (``topic_metrics``), read from the topics when scraped."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram

from dedup_broker.domain.non_persistent.metrics import NonPersistentMetrics
from dedup_broker.domain.topic_metrics import TopicMetrics
from dedup_broker.domain.write_stats import WriteStats

if TYPE_CHECKING:
    from dedup_broker.config import BrokerConfig
    from dedup_broker.domain.metered import MeteredTopic, StoredTopic


class Written(Protocol):
    """A topic, as the publish path's metrics see it."""

    @property
    def write_stats(self) -> WriteStats: ...


PUBLISH_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)


class BrokerMetrics:
    """Counters updated on the hot paths; the topics' families read when scraped."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = r = registry
        self.non_persistent = NonPersistentMetrics(r)
        self.publish_latency = Histogram(
            "pulsar_broker_publish_latency_seconds",
            "From SEND received to Kafka acknowledgement",
            buckets=PUBLISH_LATENCY_BUCKETS,
            registry=r,
        )
        self.kafka_write_errors = Counter(
            "dedup_broker_kafka_write_errors_total",
            "Entry writes Kafka did not acknowledge",
            registry=r,
        )

    def watch_topics(
        self,
        config: BrokerConfig,
        topics: Callable[[], Collection[StoredTopic]],
        non_persistent: Callable[[], Collection[MeteredTopic]],
    ) -> TopicMetrics:
        """Pulsar's per-topic (or per-namespace) families over the loaded topics."""
        families = TopicMetrics(config, topics, non_persistent)
        self.registry.register(families)
        return families

    def record_publish(self, topic: Written, size: int, seconds: float) -> None:
        """An entry Kafka acknowledged ``seconds`` after its SEND arrived."""
        self.publish_latency.observe(seconds)
        topic.write_stats.record(seconds, size)
