"""Topic and namespace policies: bodies checked as Pulsar checks them, and the value that
applies (topic, else namespace, else broker)."""

from __future__ import annotations

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.domain_base.topic_policies import (
    POLICIES,
    BadPolicyError,
    Level,
    PolicyOutOfRangeError,
    TopicPolicy,
    limit,
)
from harness.memory_table import MemoryTable

CONFIG = BrokerConfig()
BY_ROUTE = {policy.topic_route: policy for policy in POLICIES}
TOPIC = TopicName.parse("persistent://public/default/t")


def parse(route: str, value: object, level: Level = Level.TOPIC) -> object:
    return BY_ROUTE[route].parse(value, level, CONFIG)


def test_counts_take_numbers_and_numeric_strings_and_refuse_negatives_with_pulsars_words() -> None:
    assert parse("maxUnackedMessagesOnConsumer", 5) == 5
    assert parse("maxUnackedMessagesOnConsumer", "7") == 7
    with pytest.raises(PolicyOutOfRangeError, match=r"^maxUnackedNum must be 0 or more$"):
        parse("maxUnackedMessagesOnConsumer", -1)
    with pytest.raises(
        PolicyOutOfRangeError, match=r"^maxUnackedMessagesPerConsumer must be 0 or more$"
    ):
        parse("maxUnackedMessagesOnConsumer", -1, Level.NAMESPACE)
    with pytest.raises(PolicyOutOfRangeError, match=r"^maxProducersPerTopic must be 0 or more$"):
        parse("maxProducers", "-2", Level.NAMESPACE)
    with pytest.raises(PolicyOutOfRangeError, match=r"^Invalid value for message TTL$"):
        parse("messageTTL", -5)
    for malformed in ("five", True, 1.5, None, [3]):
        with pytest.raises(BadPolicyError, match="expected a whole number"):
            parse("maxConsumers", malformed)


def test_the_topic_message_size_is_bounded_by_the_brokers() -> None:
    assert parse("maxMessageSize", 1024) == 1024
    with pytest.raises(PolicyOutOfRangeError, match="smaller than that in the broker-level"):
        parse("maxMessageSize", CONFIG.max_message_size + 1)


def test_objects_take_pulsars_defaults_for_missing_fields_and_ignore_unknown_ones() -> None:
    assert parse("dispatchRate", {"dispatchThrottlingRateInMsg": "100", "x": 1}) == {
        "dispatchThrottlingRateInMsg": 100,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    }
    assert parse("inactiveTopicPolicies", {"deleteWhileInactive": True}) == {
        "inactiveTopicDeleteMode": None,
        "maxInactiveDurationSeconds": 0,
        "deleteWhileInactive": True,
    }
    with pytest.raises(BadPolicyError, match="inactiveTopicDeleteMode: unexpected value"):
        parse("inactiveTopicPolicies", {"inactiveTopicDeleteMode": "sometimes"})
    with pytest.raises(BadPolicyError, match="expected a JSON object"):
        parse("publishRate", 10)
    assert parse("subscriptionTypesEnabled", ["Shared", "Failover", "Shared"]) == [
        "Shared",
        "Failover",
    ]
    with pytest.raises(BadPolicyError, match="expected a list of subscription types"):
        parse("subscriptionTypesEnabled", ["Broadcast"])


def test_persistence_is_checked_as_pulsar_does() -> None:
    body = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}
    persistence = parse("persistence", body)
    assert isinstance(persistence, dict) and persistence["managedLedgerMaxMarkDeleteRate"] == 0.0
    with pytest.raises(BadPolicyError, match=r"^Bookkeeper-Ensemble must be <= 5 and > 0\.$"):
        parse("persistence", body | {"bookkeeperEnsemble": 0})
    with pytest.raises(
        BadPolicyError, match=r"^Bookkeeper Ensemble \(1\) >= WriteQuorum \(2\) >= AckQuorum"
    ):
        parse("persistence", body | {"bookkeeperEnsemble": 1})


async def test_the_topic_wins_over_its_namespace_and_the_namespace_over_the_broker() -> None:
    policies = Policies(MemoryTable().as_metadata_table())
    config = CONFIG.with_overrides(max_producers_per_topic=9)
    partition = TOPIC.partition(2)
    assert limit(policies, config, partition, "max_producers_per_topic") == 9
    await policies.set_namespace_value("public/default", "max_producers_per_topic", 4)
    assert limit(policies, config, partition, "max_producers_per_topic") == 4
    await policies.set_topic_value(TOPIC, "max_producers_per_topic", 0)  # 0: no limit
    assert limit(policies, config, partition, "max_producers_per_topic") == 0
    ttl: TopicPolicy = BY_ROUTE["messageTTL"]
    assert ttl.applied(policies, config, TOPIC) == 0
    assert BY_ROUTE["subscriptionTypesEnabled"].namespace_unset == []


def test_every_policy_has_its_own_stored_name_and_routes() -> None:
    assert len({p.stored for p in POLICIES}) == len(POLICIES)
    assert len({p.topic_route for p in POLICIES}) == len(POLICIES)
    namespace_routes = [p.namespace_route for p in POLICIES if p.namespace_route]
    assert len(set(namespace_routes)) == len(namespace_routes)
