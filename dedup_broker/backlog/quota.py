"""Backlog quotas, as Pulsar has them: a limit on what subscriptions leave unacknowledged,
by size (``destination_storage``) or by the age of the oldest message (``message_age``),
and what happens beyond it:

- ``producer_request_hold``: producers are disconnected and may not come back
  (Pulsar's ``ProducerBlockedQuotaExceededError``); the clients hold their messages and retry, so
  they time out after their send timeout unless the backlog shrinks;
- ``producer_exception``: the same, but the clients fail at once
  (``ProducerBlockedQuotaExceededException``);
- ``consumer_backlog_eviction``: the slow subscriptions skip their oldest messages.

Quotas are set per topic, per namespace (``backlog_quota_map``), else from the broker's
``backlogQuotaDefault*`` settings; they are checked when a producer attaches and every
``backlogQuotaCheckIntervalInSeconds`` on the topics this broker serves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import BrokerError, ConfigError, PermanentError
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import is_system_cursor

if TYPE_CHECKING:
    from dedup_broker.storage.api import ManagedCursor, ManagedLedger, Position

BACKLOG_QUOTA_MAP = "backlog_quota_map"
GIB = 1024**3


class BacklogQuotaType(StrEnum):
    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"


class QuotaPolicy(StrEnum):
    """Pulsar's ``RetentionPolicy`` of a backlog quota."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


class InvalidBacklogQuotaError(PermanentError):
    """A backlog quota Pulsar would refuse (HTTP 412)."""


class ProducerHeldByQuotaError(PermanentError):
    """The backlog is over a ``producer_request_hold`` quota: the client holds its
    messages and retries (Pulsar's ``ProducerHeldByQuotaError``)."""


class ProducerRefusedByQuotaError(PermanentError):
    """The backlog is over a ``producer_exception`` quota: the client fails its messages
    (Pulsar's ``ProducerRefusedByQuotaError``)."""


@dataclass(frozen=True)
class BacklogQuota:
    limit_size: int = -1
    """Bytes (``destination_storage``); -1: no limit."""
    limit_time: int = -1
    """Seconds (``message_age``); -1: no limit."""
    policy: QuotaPolicy = QuotaPolicy.PRODUCER_REQUEST_HOLD

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``BacklogQuota`` (``limit`` is its older name of ``limitSize``)."""
        return {
            "limit": self.limit_size,
            "limitSize": self.limit_size,
            "limitTime": self.limit_time,
            "policy": self.policy.value,
        }

    @classmethod
    def from_json(cls, body: object) -> BacklogQuota:
        if not isinstance(body, dict):
            raise InvalidBacklogQuotaError("a backlog quota is a JSON object")
        try:
            size = body.get("limitSize", body.get("limit"))
            size = -1 if size is None else size
            policy = QuotaPolicy(str(body.get("policy", QuotaPolicy.PRODUCER_REQUEST_HOLD)))
            return cls(int(size), int(body.get("limitTime", -1)), policy)
        except (TypeError, ValueError):
            raise InvalidBacklogQuotaError(
                f"invalid backlog quota {body}: limitSize and limitTime are numbers, policy "
                f"one of {', '.join(p.value for p in QuotaPolicy)}"
            ) from None


def quota_type(text: str) -> BacklogQuotaType:
    """``?backlogQuotaType=`` (``destination_storage`` when absent)."""
    try:
        return BacklogQuotaType(text or BacklogQuotaType.DESTINATION_STORAGE)
    except ValueError:
        raise InvalidBacklogQuotaError(f"unknown backlogQuotaType {text!r}") from None


def check_quota(kind: BacklogQuotaType, quota: BacklogQuota) -> None:
    if kind is BacklogQuotaType.DESTINATION_STORAGE and quota.limit_size < -1:
        raise InvalidBacklogQuotaError("limitSize must be -1 or more")
    if kind is BacklogQuotaType.MESSAGE_AGE and quota.limit_time < -1:
        raise InvalidBacklogQuotaError("limitTime must be -1 or more")


def default_quotas(config: BrokerConfig) -> dict[BacklogQuotaType, BacklogQuota]:
    """The broker's quotas (``backlogQuotaDefault*``); raises ConfigError on a bad policy."""
    try:
        policy = QuotaPolicy(config.backlog_quota_default_retention_policy)
    except ValueError:
        raise ConfigError(
            "backlogQuotaDefaultRetentionPolicy must be one of "
            f"{', '.join(p.value for p in QuotaPolicy)}"
        ) from None
    size = config.backlog_quota_default_limit_bytes
    if config.backlog_quota_default_limit_gb > 0:  # Pulsar's older setting comes first
        size = int(config.backlog_quota_default_limit_gb * GIB)
    quotas: dict[BacklogQuotaType, BacklogQuota] = {}
    if size >= 0:
        quotas[BacklogQuotaType.DESTINATION_STORAGE] = BacklogQuota(size, -1, policy)
    if config.backlog_quota_default_limit_second >= 0:
        age = config.backlog_quota_default_limit_second
        quotas[BacklogQuotaType.MESSAGE_AGE] = BacklogQuota(-1, age, policy)
    return quotas


def stored_quotas(raw: object) -> dict[BacklogQuotaType, BacklogQuota]:
    if not isinstance(raw, dict):
        return {}
    return {BacklogQuotaType(k): BacklogQuota.from_json(v) for k, v in raw.items()}


def quota_map_json(quotas: dict[BacklogQuotaType, BacklogQuota]) -> dict[str, Any]:
    return {kind.value: quota.to_json() for kind, quota in quotas.items()}


def applied_quotas(
    policies: Policies, config: BrokerConfig, name: TopicName
) -> dict[BacklogQuotaType, BacklogQuota]:
    """Per type: the topic's quota, else its namespace's, else the broker's."""
    applied = default_quotas(config)
    applied.update(stored_quotas(policies.namespace_value(name.namespace_name, BACKLOG_QUOTA_MAP)))
    applied.update(stored_quotas(policies.topic_value(name, BACKLOG_QUOTA_MAP)))
    return applied


@dataclass(frozen=True)
class Breach:
    kind: BacklogQuotaType
    quota: BacklogQuota
    detail: str


def subscription_cursors(ledger: ManagedLedger) -> list[ManagedCursor]:
    return [c for n, c in ledger.cursors.opened().items() if not is_system_cursor(n)]


def estimated_backlog_size(
    ledger: ManagedLedger, cursor: ManagedCursor, backlog: int | None = None
) -> int:
    """Bytes a cursor has yet to acknowledge: its backlog (``backlog``, when the caller
    has it already) times the average entry size."""
    entries = ledger.number_of_entries()
    if not entries:
        return 0
    return (cursor.backlog() if backlog is None else backlog) * ledger.total_size // entries


async def oldest_unacked_ms(ledger: ManagedLedger, cursor: ManagedCursor) -> int | None:
    """The publish time of the cursor's oldest unacknowledged entry (None: none)."""
    if cursor.backlog() == 0:
        return None
    position = ledger.next_position(cursor.mark_delete_position)
    entry = await ledger.read_entry(position)
    return int(parse_metadata_only(entry.data).publish_time) or entry.timestamp_ms


async def find_breach(
    quotas: dict[BacklogQuotaType, BacklogQuota], ledger: ManagedLedger
) -> Breach | None:
    """The first quota a subscription of the ledger is over, if any."""
    cursors = subscription_cursors(ledger)
    size_quota = quotas.get(BacklogQuotaType.DESTINATION_STORAGE)
    if size_quota is not None and size_quota.limit_size >= 0:
        largest = max((estimated_backlog_size(ledger, c) for c in cursors), default=0)
        if largest > size_quota.limit_size:
            detail = f"backlog of {largest} bytes over the quota of {size_quota.limit_size}"
            return Breach(BacklogQuotaType.DESTINATION_STORAGE, size_quota, detail)
    age_quota = quotas.get(BacklogQuotaType.MESSAGE_AGE)
    if age_quota is not None and age_quota.limit_time > 0:
        now_ms = int(time.time() * 1000)
        for cursor in cursors:
            oldest = await oldest_unacked_ms(ledger, cursor)
            if oldest is not None and now_ms - oldest > age_quota.limit_time * 1000:
                age = (now_ms - oldest) // 1000
                detail = f"oldest unacknowledged message {age} s old, quota {age_quota.limit_time}"
                return Breach(BacklogQuotaType.MESSAGE_AGE, age_quota, detail)
    return None


async def check_producer(
    policies: Policies, config: BrokerConfig, name: TopicName, ledger: ManagedLedger
) -> None:
    """A producer may not attach while a producer-blocking quota is exceeded."""
    if not config.backlog_quota_check_enabled:
        return
    breach = await find_breach(applied_quotas(policies, config, name), ledger)
    if breach is None or breach.quota.policy is QuotaPolicy.CONSUMER_BACKLOG_EVICTION:
        return
    reason = f"Cannot create producer on topic with backlog quota exceeded: {breach.detail}"
    if breach.quota.policy is QuotaPolicy.PRODUCER_EXCEPTION:
        raise ProducerRefusedByQuotaError(reason)
    raise ProducerHeldByQuotaError(reason)


EVICTION_BATCH = 10_000
"""Entries one check moves a cursor past at most (the next check goes on)."""


async def evict(breach: Breach, ledger: ManagedLedger) -> int:
    """``consumer_backlog_eviction``: move slow cursors past their oldest entries until the
    backlog fits the quota; the entries skipped (as acknowledged)."""
    skipped = 0
    now_ms = int(time.time() * 1000)
    for cursor in subscription_cursors(ledger):
        target: Position | None = None
        if breach.kind is BacklogQuotaType.DESTINATION_STORAGE:
            entries = ledger.number_of_entries()
            average = max(ledger.total_size // entries, 1) if entries else 1
            excess = cursor.backlog() - breach.quota.limit_size // average
            position = cursor.mark_delete_position
            for _ in range(min(max(excess, 0), EVICTION_BATCH)):
                position = ledger.next_position(position)
                target = position
        else:
            position = cursor.mark_delete_position
            for _ in range(min(cursor.backlog(), EVICTION_BATCH)):
                candidate = ledger.next_position(position)
                try:
                    entry = await ledger.read_entry(candidate)
                except BrokerError:
                    break
                published = int(parse_metadata_only(entry.data).publish_time)
                if now_ms - (published or entry.timestamp_ms) <= breach.quota.limit_time * 1000:
                    break
                position = target = candidate
        if target is not None:
            before = cursor.backlog()
            cursor.mark_delete(target)
            if cursor.read_position <= target:
                cursor.seek(ledger.next_position(target))
            skipped += before - cursor.backlog()
    return skipped
