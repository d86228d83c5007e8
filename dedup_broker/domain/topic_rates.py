"""The periodic stats update: every ``statsUpdateFrequencyInSecs`` the counters of each
producer and consumer of the loaded topics are sampled (``domain_base.rates``), as
Pulsar's broker updates its rates. A topic's and a subscription's message rates are the
sums of their producers' and consumers' (Pulsar's too), so these carry meters; so does a
persistent topic for its storage, whose entries written and read no client owns (Pulsar's
managed-ledger rates)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from dedup_broker.domain.consumer import Consumer
from dedup_broker.domain_base.producer import Producer
from dedup_broker.domain_base.rates import SampledRates, average_size, rate, sampled

if TYPE_CHECKING:
    from dedup_broker.storage.api import ManagedLedger


class RatedSubscription(Protocol):
    @property
    def consumers(self) -> Sequence[Consumer]: ...


class RatedTopic(Protocol):
    """A persistent or a non-persistent topic."""

    @property
    def producers(self) -> Mapping[str, Producer]: ...

    @property
    def subscriptions(self) -> Mapping[str, RatedSubscription]: ...


class StorageRatedTopic(Protocol):
    """A persistent topic, as its storage rates see it."""

    storage_rates: SampledRates | None

    @property
    def managed_ledger(self) -> ManagedLedger: ...

    @property
    def entries_read(self) -> int: ...


def sample_topics(topics: Iterable[RatedTopic], now: float, since: float) -> None:
    """Sample every producer's and consumer's counters at ``now``; ``since`` is the time
    of the previous sampling."""
    for topic in topics:
        for producer in topic.producers.values():
            produced = (producer.msgs_in, producer.bytes_in)
            producer.rates = sampled(producer.rates, produced, now, since)
        for subscription in topic.subscriptions.values():
            for consumer in subscription.consumers:
                sent = (
                    consumer.msgs_out,
                    consumer.bytes_out,
                    consumer.msgs_redelivered,
                    consumer.msgs_acked,
                )
                consumer.rates = sampled(consumer.rates, sent, now, since)


def sample_storage(topics: Iterable[StorageRatedTopic], now: float, since: float) -> None:
    """Sample each persistent topic's entries written (the managed ledger's own count)
    and read (by its subscriptions) at ``now``."""
    for topic in topics:
        entries = (topic.managed_ledger.entries_added, topic.entries_read)
        topic.storage_rates = sampled(topic.storage_rates, entries, now, since)


def in_rates(producers: Iterable[Producer]) -> dict[str, float]:
    """A topic's ``msgRateIn``, ``msgThroughputIn`` and ``averageMsgSize``: its
    publishers' sums, as Pulsar sums them."""
    meters = [p.rates for p in producers]
    messages = sum(rate(m, 0) for m in meters)
    throughput = sum(rate(m, 1) for m in meters)
    return {
        "msgRateIn": messages,
        "msgThroughputIn": throughput,
        "averageMsgSize": average_size(throughput, messages),
    }


def out_rates(consumers: Iterable[Consumer]) -> dict[str, float]:
    """A subscription's (or a topic's) ``msgRateOut``, ``msgThroughputOut`` and
    ``msgRateRedeliver``: its consumers' sums, as Pulsar sums them."""
    meters = [c.rates for c in consumers]
    return {
        "msgRateOut": sum(rate(m, 0) for m in meters),
        "msgThroughputOut": sum(rate(m, 1) for m in meters),
        "msgRateRedeliver": sum(rate(m, 2) for m in meters),
    }


class StatsUpdates:
    """One sampling per call, over the topics ``topics`` names then (``stored``: the
    persistent ones, for their storage rates), with the time of ``clock`` (tests move
    their own)."""

    def __init__(
        self,
        topics: Callable[[], Iterable[RatedTopic]],
        clock: Callable[[], float] = time.monotonic,
        *,
        stored: Callable[[], Iterable[StorageRatedTopic]] = lambda: (),
    ) -> None:
        self._topics = topics
        self._stored = stored
        self._clock = clock
        self._last = clock()

    async def update(self) -> None:
        now = self._clock()
        sample_topics(self._topics(), now, self._last)
        sample_storage(self._stored(), now, self._last)
        self._last = now
