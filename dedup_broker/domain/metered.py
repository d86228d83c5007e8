"""Topics and subscriptions as the metrics read them (structural types, so that the
metrics modules need not import the topic modules, which import them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from dedup_broker.domain.consumer import Consumer
from dedup_broker.domain.subscription import Subscription
from dedup_broker.domain.write_stats import WriteStats
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.producer import Producer
from dedup_broker.domain_base.rates import SampledRates
from dedup_broker.pip6.topic_dedup import TopicDeduplication
from dedup_broker.storage.api import ManagedLedger


class MeteredSubscription(Protocol):
    @property
    def consumers(self) -> Sequence[Consumer]: ...

    @property
    def msgs_out(self) -> int: ...

    @property
    def bytes_out(self) -> int: ...


class MeteredTopic(Protocol):
    """A non-persistent topic, or what every topic has."""

    @property
    def name(self) -> TopicName: ...

    @property
    def producers(self) -> Mapping[str, Producer]: ...

    @property
    def subscriptions(self) -> Mapping[str, MeteredSubscription]: ...

    @property
    def msgs_in(self) -> int: ...

    @property
    def bytes_in(self) -> int: ...


class StoredTopic(MeteredTopic, Protocol):
    """A persistent topic: a managed ledger, its writes, its deduplication."""

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...

    @property
    def managed_ledger(self) -> ManagedLedger: ...

    @property
    def write_stats(self) -> WriteStats: ...

    @property
    def storage_rates(self) -> SampledRates | None:
        """Entries written and read per second (``topic_rates.sample_storage``)."""
        ...

    @property
    def dedup(self) -> TopicDeduplication: ...
