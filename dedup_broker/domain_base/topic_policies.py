"""Pulsar's topic and namespace policies that limit or shape a topic: unacknowledged
messages, producers, consumers, subscriptions, message size and TTL, rates, persistence,
inactive topics, delayed delivery, subscription types, automatic subscription creation,
replication clusters. The features declare their own (retention, offloading, schemas).

Each is stored under one name in the policies table, on the topic (a partition follows
its partitioned topic) and on the namespace; what applies is the topic's value, else the
namespace's, else the broker's (``TopicPolicy.applied``), as in Pulsar. Bodies are checked
as Pulsar checks them: a body of the wrong shape is refused as malformed (400), a value
out of range with Pulsar's own message (412, or 400 where Pulsar answers that).

The broker applies ``maxUnackedMessagesOnConsumer``, ``maxProducers``, ``maxConsumers`` and
``maxConsumersPerSubscription`` when a client attaches (``limit``; their broker level is
the setting ``maxUnackedMessagesPerConsumer``, ``maxProducersPerTopic``, ...),
``autoSubscriptionCreation`` when a consumer names a subscription that does not exist and
``delayedDelivery`` (its ``active`` flag) as Shared and Key_Shared subscriptions dispatch;
the others are stored and served, and their broker level is what this broker does (no
TTL, no throttling, no deletion of inactive topics, every subscription type, one cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import PermanentError
from dedup_broker.json_values import decimal_number, whole_number

if TYPE_CHECKING:
    from dedup_broker.domain_base.names import TopicName
    from dedup_broker.domain_base.policies import Policies

__all__ = [
    "POLICIES",
    "BadPolicyError",
    "ConsumerLimits",
    "Level",
    "PolicyOutOfRangeError",
    "TopicPolicy",
    "creates_subscriptions",
    "delays_delivery",
    "limit",
]


class BadPolicyError(PermanentError):
    """A body that is not the policy's shape (Pulsar: 400)."""


class PolicyOutOfRangeError(PermanentError):
    """A value Pulsar refuses as out of range (412, with Pulsar's message)."""


class Level(Enum):
    TOPIC = "topic"
    NAMESPACE = "namespace"


Parse = Callable[[object, Level, BrokerConfig], object]
"""A body's JSON value -> the value stored (or ``BadPolicyError``/``PolicyOutOfRangeError``)."""


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """One policy: its stored name, Pulsar's route names, its body, its broker level."""

    stored: str
    topic_route: str
    namespace_route: str | None
    parse: Parse
    broker: Callable[[BrokerConfig], object]
    """What applies when neither the topic nor its namespace sets the policy."""
    namespace_unset: object = None
    """What Pulsar answers for a namespace that does not set it (``None``: no content)."""

    def applied(self, policies: Policies, config: BrokerConfig, topic: TopicName) -> object:
        """The topic's value, else its namespace's, else the broker's."""
        value = policies.effective(topic, self.stored)
        return self.broker(config) if value is None else value


def _count(topic_message: str, namespace_message: str) -> Parse:
    """A whole number >= 0, refused with Pulsar's message of that level when negative."""

    def parse(value: object, level: Level, config: BrokerConfig) -> int:
        number = _whole(value)
        if number < 0:
            message = topic_message if level is Level.TOPIC else namespace_message
            raise PolicyOutOfRangeError(message)
        return number

    return parse


def _whole(value: object) -> int:
    number = whole_number(value)
    if number is None:
        raise BadPolicyError(f"expected a whole number, got {value!r}")
    return number


def _message_size(value: object, level: Level, config: BrokerConfig) -> int:
    number = _whole(value)
    if not 0 <= number <= config.max_message_size:
        raise PolicyOutOfRangeError(
            "topic-level maxMessageSize must be greater than or equal to 0 and must be "
            "smaller than that in the broker-level"
        )
    return number


_FieldKind = Callable[[object], object | None]


def _boolean(value: object) -> bool | None:
    """``true``, or ``"true"`` as Pulsar's JSON reader also takes it."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value if isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _one_of(*names: str) -> _FieldKind:
    return lambda value: value if value in names else None


def _object(
    shape: Mapping[str, tuple[_FieldKind, object]],
) -> Callable[[object], dict[str, object]]:
    """A JSON object of Pulsar's class ``shape`` (field -> kind, default): fields it does
    not name are ignored and missing ones take the class's defaults, as Pulsar reads it."""

    def read(value: object) -> dict[str, object]:
        if not isinstance(value, dict):
            raise BadPolicyError(f"expected a JSON object with {', '.join(shape)}, got {value!r}")
        fields: dict[str, object] = {}
        for name, (kind, default) in shape.items():
            given = value.get(name)
            if given is None:
                fields[name] = default
                continue
            fields[name] = kind(given)
            if fields[name] is None:
                raise BadPolicyError(f"{name}: unexpected value {given!r}")
        return fields

    return read


def _shaped(shape: Mapping[str, tuple[_FieldKind, object]]) -> Parse:
    read = _object(shape)
    return lambda value, level, config: read(value)


_DISPATCH_RATE = {
    "dispatchThrottlingRateInMsg": (whole_number, -1),
    "dispatchThrottlingRateInByte": (whole_number, -1),
    "relativeToPublishRate": (_boolean, False),
    "ratePeriodInSecond": (whole_number, 1),
}
_PUBLISH_RATE = {
    "publishThrottlingRateInMsg": (whole_number, -1),
    "publishThrottlingRateInByte": (whole_number, -1),
}
_SUBSCRIBE_RATE = {
    "subscribeThrottlingRatePerConsumer": (whole_number, -1),
    "ratePeriodInSecond": (whole_number, 30),
}
_DELAYED_DELIVERY = {
    "tickTime": (whole_number, 0),
    "active": (_boolean, False),
    "maxDeliveryDelayInMillis": (whole_number, 0),
}
_INACTIVE_TOPICS = {
    "inactiveTopicDeleteMode": (
        _one_of("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"),
        None,
    ),
    "maxInactiveDurationSeconds": (whole_number, 0),
    "deleteWhileInactive": (_boolean, False),
}
_PERSISTENCE = {
    "bookkeeperEnsemble": (whole_number, 2),
    "bookkeeperWriteQuorum": (whole_number, 2),
    "bookkeeperAckQuorum": (whole_number, 2),
    "managedLedgerMaxMarkDeleteRate": (decimal_number, 0.0),
    "managedLedgerStorageClassName": (_text, None),
}
_MAX_QUORUM = 5
"""Pulsar's default ``managedLedgerMaxEnsembleSize`` (and write and ack quorum)."""


def _persistence(value: object, level: Level, config: BrokerConfig) -> dict[str, object]:
    """Pulsar's checks of ``PersistencePolicies``, with its messages (400)."""
    policy = _object(_PERSISTENCE)(value)
    quorums = (
        policy["bookkeeperEnsemble"],
        policy["bookkeeperWriteQuorum"],
        policy["bookkeeperAckQuorum"],
    )
    ensemble, write, ack = (number if isinstance(number, int) else 0 for number in quorums)
    for what, number in (("Ensemble", ensemble), ("WriteQuorum", write), ("AckQuorum", ack)):
        if not 0 < number <= _MAX_QUORUM:
            raise BadPolicyError(f"Bookkeeper-{what} must be <= {_MAX_QUORUM} and > 0.")
    if not ensemble >= write >= ack:
        raise BadPolicyError(
            f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuorum ({ack})"
        )
    return policy


def _cluster_names(value: object, level: Level, config: BrokerConfig) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise BadPolicyError(f"expected a list of cluster names, got {value!r}")
    return list(dict.fromkeys(value))


SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def _subscription_types(value: object, level: Level, config: BrokerConfig) -> list[str]:
    if not isinstance(value, list) or any(t not in SUBSCRIPTION_TYPES for t in value):
        raise BadPolicyError(
            f"expected a list of subscription types ({', '.join(SUBSCRIPTION_TYPES)}), "
            f"got {value!r}"
        )
    return list(dict.fromkeys(value))


def _rate(messages: int, period: int = 1) -> dict[str, object]:
    return {
        "dispatchThrottlingRateInMsg": messages,
        "dispatchThrottlingRateInByte": 0,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": period,
    }


def _fixed(value: object) -> Callable[[BrokerConfig], object]:
    return lambda config: value


_UNACKED = "maxUnackedNum must be 0 or more"
AUTO_SUBSCRIPTION_CREATION = "auto_subscription_creation_override"
DELAYED_DELIVERY = "delayed_delivery_policies"

POLICIES: tuple[TopicPolicy, ...] = (
    TopicPolicy(
        "max_unacked_messages_per_consumer",
        "maxUnackedMessagesOnConsumer",
        "maxUnackedMessagesPerConsumer",
        _count(_UNACKED, "maxUnackedMessagesPerConsumer must be 0 or more"),
        lambda config: config.max_unacked_messages_per_consumer,
    ),
    TopicPolicy(
        "max_unacked_messages_per_subscription",
        "maxUnackedMessagesOnSubscription",
        "maxUnackedMessagesPerSubscription",
        _count(_UNACKED, "maxUnackedMessagesPerSubscription must be 0 or more"),
        _fixed(0),
    ),
    TopicPolicy(
        "max_producers_per_topic",
        "maxProducers",
        "maxProducersPerTopic",
        _count("maxProducers must be 0 or more", "maxProducersPerTopic must be 0 or more"),
        lambda config: config.max_producers_per_topic,
    ),
    TopicPolicy(
        "max_consumers_per_topic",
        "maxConsumers",
        "maxConsumersPerTopic",
        _count("maxConsumers must be 0 or more", "maxConsumersPerTopic must be 0 or more"),
        lambda config: config.max_consumers_per_topic,
    ),
    TopicPolicy(
        "max_consumers_per_subscription",
        "maxConsumersPerSubscription",
        "maxConsumersPerSubscription",
        _count(
            "Invalid value for maxConsumersPerSubscription",
            "maxConsumersPerSubscription must be 0 or more",
        ),
        lambda config: config.max_consumers_per_subscription,
    ),
    TopicPolicy(
        "max_subscriptions_per_topic",
        "maxSubscriptionsPerTopic",
        "maxSubscriptionsPerTopic",
        _count(
            "maxSubscriptionsPerTopic must be 0 or more",
            "maxSubscriptionsPerTopic must be 0 or more",
        ),
        _fixed(0),
    ),
    TopicPolicy(
        "message_ttl_in_seconds",
        "messageTTL",
        "messageTTL",
        _count("Invalid value for message TTL", "Invalid value for message TTL"),
        _fixed(0),
    ),
    TopicPolicy(
        "max_message_size",
        "maxMessageSize",
        None,
        _message_size,
        lambda config: config.max_message_size,
    ),
    TopicPolicy(
        DELAYED_DELIVERY,
        "delayedDelivery",
        "delayedDelivery",
        _shaped(_DELAYED_DELIVERY),
        lambda config: {
            "tickTime": 1000,
            "active": config.delayed_delivery_enabled,
            "maxDeliveryDelayInMillis": 0,
        },
    ),
    TopicPolicy(
        "dispatch_rate", "dispatchRate", "dispatchRate", _shaped(_DISPATCH_RATE), _fixed(_rate(0))
    ),
    TopicPolicy(
        "subscription_dispatch_rate",
        "subscriptionDispatchRate",
        "subscriptionDispatchRate",
        _shaped(_DISPATCH_RATE),
        _fixed(_rate(0)),
    ),
    TopicPolicy(
        "replicator_dispatch_rate",
        "replicatorDispatchRate",
        "replicatorDispatchRate",
        _shaped(_DISPATCH_RATE),
        _fixed(_rate(0)),
    ),
    TopicPolicy(
        "publish_rate",
        "publishRate",
        "publishRate",
        _shaped(_PUBLISH_RATE),
        _fixed({"publishThrottlingRateInMsg": 0, "publishThrottlingRateInByte": 0}),
    ),
    TopicPolicy(
        "subscribe_rate",
        "subscribeRate",
        "subscribeRate",
        _shaped(_SUBSCRIBE_RATE),
        _fixed({"subscribeThrottlingRatePerConsumer": 0, "ratePeriodInSecond": 30}),
    ),
    TopicPolicy(
        "persistence",
        "persistence",
        "persistence",
        _persistence,
        lambda config: {
            "bookkeeperEnsemble": 1,
            "bookkeeperWriteQuorum": 1,
            "bookkeeperAckQuorum": 1,
            "managedLedgerMaxMarkDeleteRate": config.managed_ledger_default_mark_delete_rate_limit,
        },
    ),
    TopicPolicy(
        "inactive_topic_policies",
        "inactiveTopicPolicies",
        "inactiveTopicPolicies",
        _shaped(_INACTIVE_TOPICS),
        _fixed(
            {
                "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                "maxInactiveDurationSeconds": 60,
                "deleteWhileInactive": False,
            }
        ),
    ),
    TopicPolicy(
        AUTO_SUBSCRIPTION_CREATION,
        "autoSubscriptionCreation",
        "autoSubscriptionCreation",
        _shaped({"allowAutoSubscriptionCreation": (_boolean, False)}),
        _fixed({"allowAutoSubscriptionCreation": True}),
    ),
    TopicPolicy(
        "replication_clusters",
        "replication",
        None,
        _cluster_names,
        lambda config: [config.cluster_name],
    ),
    TopicPolicy(
        "subscription_types_enabled",
        "subscriptionTypesEnabled",
        "subscriptionTypesEnabled",
        _subscription_types,
        _fixed(list(SUBSCRIPTION_TYPES)),
        namespace_unset=[],
    ),
)

_BY_STORED = {policy.stored: policy for policy in POLICIES}


def limit(policies: Policies, config: BrokerConfig, topic: TopicName, stored: str) -> int:
    """The limit that applies to ``topic`` (0: none): ``stored`` is one of the counts above
    (``max_producers_per_topic``, ...)."""
    value = _BY_STORED[stored].applied(policies, config, topic)
    return value if isinstance(value, int) else 0


def creates_subscriptions(policies: Policies, config: BrokerConfig, topic: TopicName) -> bool:
    """``autoSubscriptionCreation`` of the topic, else its namespace (the broker always
    creates the subscription a consumer names)."""
    value = _BY_STORED[AUTO_SUBSCRIPTION_CREATION].applied(policies, config, topic)
    return not isinstance(value, dict) or value.get("allowAutoSubscriptionCreation") is not False


def delays_delivery(policies: Policies, config: BrokerConfig, topic: TopicName) -> bool:
    """Whether Shared and Key_Shared subscriptions hold messages back until their delivery
    time: ``delayedDelivery.active`` of the topic, else its namespace, else the broker's
    ``delayedDeliveryEnabled``."""
    value = _BY_STORED[DELAYED_DELIVERY].applied(policies, config, topic)
    return not isinstance(value, dict) or value.get("active") is not False


class ConsumerLimits(NamedTuple):
    """The consumer limits that apply to a topic (0: none)."""

    per_topic: int
    per_subscription: int
    unacked_messages: int
    """Per consumer of a Shared or Key_Shared subscription."""

    @classmethod
    def of(cls, policies: Policies, config: BrokerConfig, topic: TopicName) -> ConsumerLimits:
        """``maxConsumers``, ``maxConsumersPerSubscription``, ``maxUnackedMessagesOnConsumer``
        of the topic, else its namespace, else the broker."""
        return cls(
            limit(policies, config, topic, "max_consumers_per_topic"),
            limit(policies, config, topic, "max_consumers_per_subscription"),
            limit(policies, config, topic, "max_unacked_messages_per_consumer"),
        )
