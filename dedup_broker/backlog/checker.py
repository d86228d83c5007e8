"""The periodic backlog quota check (``backlogQuotaCheckIntervalInSeconds``) over the
topics this broker serves: producers of a topic over a producer-blocking quota are
disconnected (they come back to ``ProducerBlockedQuotaExceeded*``); an eviction quota
moves the slow subscriptions on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from dedup_broker.backlog.quota import QuotaPolicy, applied_quotas, evict, find_breach
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.producer import Producer
from dedup_broker.errors import BrokerError
from dedup_broker.periodic import PeriodicTask

if TYPE_CHECKING:
    from dedup_broker.storage.api import ManagedLedger

log = logging.getLogger(__name__)


class QuotaTopic(Protocol):
    """What the check needs of a loaded topic (``domain.topic.Topic``)."""

    name: TopicName
    managed_ledger: ManagedLedger
    producers: dict[str, Producer]

    def remove_producer(self, producer: Producer) -> None: ...


class BacklogQuotaChecker:
    def __init__(
        self,
        config: BrokerConfig,
        policies: Policies,
        loaded: Callable[[], Iterable[QuotaTopic]],
    ) -> None:
        self._config = config
        self._policies = policies
        self._loaded = loaded
        self._periodic = PeriodicTask(
            "backlog quota check", config.backlog_quota_check_interval_in_seconds, self._check_all
        )

    def start(self) -> None:
        if self._config.backlog_quota_check_enabled:
            self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def check(self, topic: QuotaTopic) -> None:
        quotas = applied_quotas(self._policies, self._config, topic.name)
        breach = await find_breach(quotas, topic.managed_ledger)
        if breach is None:
            return
        if breach.quota.policy is QuotaPolicy.CONSUMER_BACKLOG_EVICTION:
            skipped = await evict(breach, topic.managed_ledger)
            log.info("%s: %s; %d entries evicted", topic.name, breach.detail, skipped)
            return
        if topic.producers:
            log.info("%s: %s; disconnecting its producers", topic.name, breach.detail)
        for producer in list(topic.producers.values()):
            topic.remove_producer(producer)
            producer.link.close_producer(producer)

    async def _check_all(self) -> None:
        for topic in list(self._loaded()):
            try:
                await self.check(topic)
            except BrokerError as exc:
                log.warning("backlog quota check on %s: %s", topic.name, exc)
