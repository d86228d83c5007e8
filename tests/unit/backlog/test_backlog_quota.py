"""Backlog quotas: Pulsar's bodies, precedence (topic > namespace > broker), producers
held or refused over a quota, eviction moving slow subscriptions on."""

from __future__ import annotations

import pytest

from dedup_broker.backlog.checker import BacklogQuotaChecker
from dedup_broker.backlog.quota import (
    BACKLOG_QUOTA_MAP,
    BacklogQuota,
    BacklogQuotaType,
    InvalidBacklogQuotaError,
    ProducerHeldByQuotaError,
    ProducerRefusedByQuotaError,
    QuotaPolicy,
    applied_quotas,
    check_producer,
    quota_map_json,
)
from dedup_broker.config import BrokerConfig
from dedup_broker.domain import subscription_admin
from dedup_broker.domain.topic import Topic
from dedup_broker.domain_base.producer import Producer
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import parse_metadata_only
from harness.client_commands import message_block
from harness.domain_links import ProducerSide
from harness.memory_broker import MemoryBroker

TOPIC = "persistent://public/default/quota"
SIZE = BacklogQuotaType.DESTINATION_STORAGE


def test_pulsar_bodies_read_both_names_of_the_size() -> None:
    assert BacklogQuota.from_json({"limit": 10, "policy": "producer_exception"}) == BacklogQuota(
        10, -1, QuotaPolicy.PRODUCER_EXCEPTION
    )
    body = {"limitSize": 5, "limitTime": 60, "policy": "consumer_backlog_eviction"}
    quota = BacklogQuota.from_json(body)
    assert quota.to_json() == {**body, "limit": 5}
    with pytest.raises(InvalidBacklogQuotaError):
        BacklogQuota.from_json({"limitSize": 5, "policy": "drop_everything"})


async def test_topic_over_namespace_over_broker() -> None:
    broker = MemoryBroker.configured(backlog_quota_default_limit_gb=10)
    topic = await broker.topic(TOPIC)
    assert applied_quotas(broker.policies, broker.config, topic.name) == {
        SIZE: BacklogQuota(10 * 1024**3, -1, QuotaPolicy.PRODUCER_REQUEST_HOLD)
    }
    namespace_quota = {SIZE: BacklogQuota(100, -1, QuotaPolicy.PRODUCER_EXCEPTION)}
    await broker.policies.set_namespace_value(
        "public/default", BACKLOG_QUOTA_MAP, quota_map_json(namespace_quota)
    )
    assert applied_quotas(broker.policies, broker.config, topic.name)[SIZE].limit_size == 100
    topic_quota = {SIZE: BacklogQuota(7, -1, QuotaPolicy.PRODUCER_REQUEST_HOLD)}
    quota_json = quota_map_json(topic_quota)
    await broker.policies.set_topic_value(topic.name, BACKLOG_QUOTA_MAP, quota_json)
    assert applied_quotas(broker.policies, broker.config, topic.name)[SIZE].limit_size == 7


async def backlogged(broker: MemoryBroker, entries: int) -> tuple[Topic, Producer]:
    """A topic with a subscription that acknowledged nothing of ``entries`` entries."""
    topic = await broker.topic(TOPIC)
    await subscription_admin.create_subscription(topic, "slow", None)
    producer = Producer(ProducerSide(), 1, "p", user_provided_name=True)
    topic.add_producer(producer)
    for seq in range(entries):
        block = message_block("p", seq, payload=b"x" * 100)
        send = pb.CommandSend(producer_id=1, sequence_id=seq)
        await topic.publish(producer, send, block, parse_metadata_only(block))
    return topic, producer


async def set_quota(broker: MemoryBroker, quota: BacklogQuota) -> None:
    await broker.policies.set_namespace_value(
        "public/default", BACKLOG_QUOTA_MAP, quota_map_json({SIZE: quota})
    )


@pytest.mark.parametrize(
    ("policy", "refusal"),
    [
        (QuotaPolicy.PRODUCER_REQUEST_HOLD, ProducerHeldByQuotaError),
        (QuotaPolicy.PRODUCER_EXCEPTION, ProducerRefusedByQuotaError),
    ],
)
async def test_producers_over_a_quota_are_closed_and_refused(
    policy: QuotaPolicy, refusal: type[Exception]
) -> None:
    broker = MemoryBroker()
    topic, producer = await backlogged(broker, 20)
    checker = BacklogQuotaChecker(broker.config, broker.policies, lambda: [topic])
    await set_quota(broker, BacklogQuota(100_000, -1, policy))
    await checker.check(topic)
    assert topic.producers  # within the quota
    await set_quota(broker, BacklogQuota(500, -1, policy))
    await checker.check(topic)
    assert not topic.producers
    assert isinstance(producer.link, ProducerSide) and producer.link.closed == ["p"]
    with pytest.raises(refusal, match="backlog quota exceeded"):
        await check_producer(broker.policies, broker.config, topic.name, topic.managed_ledger)


async def test_eviction_skips_the_oldest_entries_down_to_the_quota() -> None:
    broker = MemoryBroker()
    topic, _ = await backlogged(broker, 20)
    cursor = topic.subscriptions["slow"].cursor
    assert cursor.backlog() == 20
    entry_size = topic.managed_ledger.total_size // 20
    await set_quota(broker, BacklogQuota(5 * entry_size, -1, QuotaPolicy.CONSUMER_BACKLOG_EVICTION))
    await BacklogQuotaChecker(broker.config, broker.policies, lambda: [topic]).check(topic)
    assert cursor.backlog() == 5
    assert topic.producers  # eviction leaves producers alone
    await check_producer(broker.policies, broker.config, topic.name, topic.managed_ledger)


def test_a_bad_broker_default_policy_stops_the_broker() -> None:
    from dedup_broker.backlog.quota import default_quotas
    from dedup_broker.errors import ConfigError

    with pytest.raises(ConfigError, match="backlogQuotaDefaultRetentionPolicy"):
        default_quotas(BrokerConfig().with_overrides(backlog_quota_default_retention_policy="x"))
