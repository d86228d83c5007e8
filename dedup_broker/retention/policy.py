"""Retention policies (topic and namespace levels, broker defaults) and the periodic trim
check.

Pulsar's semantics: ``retentionTimeInMinutes`` and ``retentionSizeInMB``; -1 is
unlimited in that dimension, 0 keeps nothing consumed; ``(0, >0)`` and ``(>0, 0)`` are
refused. Consumed ledgers are trimmed every ``retentionCheckIntervalInSeconds``, after a
rollover, and when the slowest durable cursor enters another ledger (storage's triggers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_policies import Level, TopicPolicy
from dedup_broker.errors import PermanentError
from dedup_broker.periodic import PeriodicTask
from dedup_broker.storage.api import Retention, is_system_cursor

if TYPE_CHECKING:
    from dedup_broker.storage.api import ManagedLedger

log = logging.getLogger(__name__)

RETENTION = "retention_policies"


class InvalidRetentionError(PermanentError):
    """A retention policy Pulsar would refuse."""


def parse_retention(body: Any) -> Retention:
    """Pulsar's JSON ``{"retentionTimeInMinutes": .., "retentionSizeInMB": ..}``."""
    if not isinstance(body, dict):
        raise InvalidRetentionError("expected a JSON object with retention settings")
    try:
        time_minutes = int(body.get("retentionTimeInMinutes", 0))
        size_mb = int(body.get("retentionSizeInMB", 0))
    except (TypeError, ValueError):
        raise InvalidRetentionError(f"retention values must be integers: {body}") from None
    if time_minutes < -1 or size_mb < -1:
        raise InvalidRetentionError("retention values must be >= -1")
    if (time_minutes == 0) != (size_mb == 0):
        raise InvalidRetentionError(
            "retention time and size must both be 0, or neither: "
            f"got {time_minutes} minutes, {size_mb} MB"
        )
    return Retention(time_minutes, size_mb)


def retention_json(retention: Retention) -> dict[str, int]:
    return {
        "retentionTimeInMinutes": retention.time_minutes,
        "retentionSizeInMB": retention.size_mb,
    }


def _topic_level_retention(value: object, level: Level, config: BrokerConfig) -> dict[str, int]:
    return retention_json(parse_retention(value))


RETENTION_POLICY = TopicPolicy(
    RETENTION,
    "retention",
    None,  # the namespace's routes are http/retention.py's
    _topic_level_retention,
    lambda config: retention_json(
        Retention(config.default_retention_time_in_minutes, config.default_retention_size_in_mb)
    ),
)
"""``/retention`` of a topic (``http/topic_policies.py``): trims follow it at the next check."""


def topic_retention(
    policies: Policies, config: BrokerConfig, name: TopicName, ledger: ManagedLedger | None = None
) -> Retention:
    """The topic's policy, else its namespace's, else the broker defaults.

    One exception to Pulsar: with no policy anywhere (broker defaults 0/0), a topic
    without any subscription (only the broker's own cursors) keeps everything, since
    nobody has said its data is consumed and its readers expect to find it. An explicit
    topic or namespace policy or non-zero broker defaults apply to such a topic as in Pulsar.
    """
    stored = policies.effective(name, RETENTION)
    if isinstance(stored, dict):
        try:
            return parse_retention(stored)
        except InvalidRetentionError:
            log.warning("ignoring an invalid stored retention policy: %s", stored)
    default = Retention(
        config.default_retention_time_in_minutes, config.default_retention_size_in_mb
    )
    unsubscribed = ledger is not None and not any(
        not is_system_cursor(cursor) for cursor in ledger.cursors.stored_names()
    )
    if unsubscribed and default == Retention(0, 0):
        return Retention(-1, -1)
    return default


async def trim_topic(
    policies: Policies, config: BrokerConfig, name: TopicName, ledger: ManagedLedger
) -> list[int]:
    """Trim a topic now under its retention (Pulsar's trimTopic); the ledgers deleted."""
    return await ledger.trimmer.trim(topic_retention(policies, config, name, ledger))


def trim_namespace(loaded: Iterable[tuple[TopicName, ManagedLedger]], namespace: str) -> None:
    """The namespace's retention changed: its loaded topics trim in the background."""
    for name, ledger in loaded:
        if name.namespace_name == namespace:
            ledger.trimmer.trim_soon()


LoadedLedgers = Callable[[], Iterable[tuple[TopicName, "ManagedLedger"]]]
"""The managed ledgers of the topics this broker serves now."""


class RetentionChecker:
    """Asks every loaded topic to trim, every ``retentionCheckIntervalInSeconds``."""

    def __init__(self, config: BrokerConfig, loaded: LoadedLedgers) -> None:
        self._loaded = loaded
        self._periodic = PeriodicTask(
            "retention check", config.retention_check_interval_in_seconds, self._check
        )

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    def trim_all(self, namespace: str | None = None) -> None:
        for name, ledger in list(self._loaded()):
            if namespace is None or name.namespace_name == namespace:
                ledger.trimmer.trim_soon()
                ledger.offloads.check_soon()

    async def _check(self) -> None:
        self.trim_all()
