"""Pulsar's namespace-only policies: subscription expiration, the topic limit, the offload
deletion lag, properties, the automatic topic creation override and the bookie affinity
group.

Each is stored under one name in the namespace's policies and read back as Pulsar
answers it (no content, or Pulsar's value for "unset"). Bodies are checked as Pulsar
checks them, with its messages: a value out of range is a 412, a body of the wrong shape
a 400 (``topic_policies.BadPolicyError``).

What applies here: ``maxTopicsPerNamespace`` (topic creation, ``domain.listing``),
``autoTopicCreation`` (``auto_topic_creation``: whether and how a topic nobody created is
made when a client uses it) and ``offloadDeletionLagMs`` (``tiered.policy``: how long a
Kafka copy outlives its offload). The others are stored and served with no effect: the
bookie affinity group (there are no bookies), ``subscriptionExpirationTime``
(subscriptions are kept until deleted) and the properties (for the namespace's users).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.topic_policies import BadPolicyError, PolicyOutOfRangeError
from dedup_broker.json_values import whole_number

if TYPE_CHECKING:
    from dedup_broker.domain_base.policies import Policies

__all__ = [
    "AUTO_TOPIC_CREATION",
    "MAX_TOPICS_PER_NAMESPACE",
    "NAMESPACE_POLICIES",
    "OFFLOAD_DELETION_LAG_MS",
    "PROPERTIES",
    "AutoTopicCreation",
    "NamespacePolicy",
    "auto_topic_creation",
    "max_topics_per_namespace",
]

MAX_TOPICS_PER_NAMESPACE = "max_topics_per_namespace"
OFFLOAD_DELETION_LAG_MS = "offload_deletion_lag_ms"
AUTO_TOPIC_CREATION = "auto_topic_creation_override"
PROPERTIES = "properties"


@dataclass(frozen=True, slots=True)
class NamespacePolicy:
    """One policy: its stored name, Pulsar's route under the namespace, its body."""

    stored: str
    route: str
    parse: Callable[[object], object]
    """A body's JSON value -> the value stored (or ``BadPolicyError``/``PolicyOutOfRangeError``)."""
    unset: object = None
    """What Pulsar answers while the namespace does not set it (``None``: no content)."""
    merges: bool = False
    """A new value adds to the stored one (properties) instead of replacing it."""


def _count(message: str) -> Callable[[object], int]:
    """A whole number >= 0, refused with Pulsar's ``message`` when negative."""

    def parse(value: object) -> int:
        number = _whole(value)
        if number < 0:
            raise PolicyOutOfRangeError(message)
        return number

    return parse


def _whole(value: object) -> int:
    number = whole_number(value)
    if number is None:
        raise BadPolicyError(f"expected a whole number, got {value!r}")
    return number


def _properties(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadPolicyError(f"expected a JSON object of strings, got {value!r}")
    return {str(key): text for key, text in value.items()}


def _bookie_affinity(value: object) -> dict[str, str]:
    fields = ("bookkeeperAffinityGroupPrimary", "bookkeeperAffinityGroupSecondary")
    if not isinstance(value, dict) or not all(isinstance(value.get(f, ""), str) for f in fields):
        raise BadPolicyError(f"expected {{{', '.join(fields)}}}, got {value!r}")
    return {field: value.get(field) or "" for field in fields}


TOPIC_TYPES = ("partitioned", "non-partitioned")


def _auto_topic_creation(value: object) -> dict[str, object]:
    """Pulsar's ``AutoTopicCreationOverride``, checked as Pulsar checks it."""
    if not isinstance(value, dict) or not isinstance(value.get("allowAutoTopicCreation"), bool):
        raise BadPolicyError(
            f"expected {{allowAutoTopicCreation, topicType, defaultNumPartitions}}, got {value!r}"
        )
    allow, topic_type = value["allowAutoTopicCreation"], value.get("topicType")
    partitions = value.get("defaultNumPartitions")
    if partitions is not None and whole_number(partitions) is None:
        raise BadPolicyError(f"defaultNumPartitions: expected a number, got {partitions!r}")
    number = whole_number(partitions)
    detail = ""
    if allow and topic_type not in TOPIC_TYPES:
        detail = f"Unknown topic type [{topic_type}]"
    elif allow and topic_type == "partitioned" and number is None:
        detail = "[defaultNumPartitions] cannot be null when the type is partitioned."
    elif allow and topic_type == "partitioned" and number is not None and number < 1:
        detail = "[defaultNumPartitions] cannot be less than 1 for partition type."
    elif allow and topic_type == "non-partitioned" and number is not None:
        detail = "[defaultNumPartitions] is not allowed to be set when the type is non-partition."
    if detail:
        raise PolicyOutOfRangeError(
            f"Invalid configuration for autoTopicCreationOverride. the detail is {detail}"
        )
    override: dict[str, object] = {"allowAutoTopicCreation": allow}
    if allow:
        override["topicType"] = topic_type
        if number is not None:
            override["defaultNumPartitions"] = number
    return override


NAMESPACE_POLICIES: tuple[NamespacePolicy, ...] = (
    NamespacePolicy(
        "subscription_expiration_time_minutes",
        "subscriptionExpirationTime",
        _count("Invalid value for subscription expiration time"),
    ),
    NamespacePolicy(
        MAX_TOPICS_PER_NAMESPACE,
        "maxTopicsPerNamespace",
        _count("maxTopicsPerNamespace must be 0 or more"),
        unset=0,
    ),
    NamespacePolicy(OFFLOAD_DELETION_LAG_MS, "offloadDeletionLagMs", _whole),
    NamespacePolicy(PROPERTIES, "properties", _properties, unset={}, merges=True),
    NamespacePolicy(AUTO_TOPIC_CREATION, "autoTopicCreation", _auto_topic_creation),
    NamespacePolicy("bookie_affinity_group", "persistence/bookieAffinity", _bookie_affinity),
)


def max_topics_per_namespace(policies: Policies, config: BrokerConfig, namespace: str) -> int:
    """The namespace's limit, else the broker's ``maxTopicsPerNamespace`` (0: none)."""
    value = policies.namespace_value(namespace, MAX_TOPICS_PER_NAMESPACE)
    return value if isinstance(value, int) else config.max_topics_per_namespace


class AutoTopicCreation(NamedTuple):
    """Whether a topic nobody created is made when a client uses it, and how."""

    allowed: bool
    partitioned: bool
    partitions: int


def auto_topic_creation(
    policies: Policies, config: BrokerConfig, namespace: str
) -> AutoTopicCreation:
    """The namespace's ``autoTopicCreation`` override, else the broker's
    ``allowAutoTopicCreation``, ``allowAutoTopicCreationType``, ``defaultNumPartitions``."""
    override = policies.namespace_value(namespace, AUTO_TOPIC_CREATION)
    if isinstance(override, dict) and isinstance(override.get("allowAutoTopicCreation"), bool):
        partitions = whole_number(override.get("defaultNumPartitions"))
        return AutoTopicCreation(
            override["allowAutoTopicCreation"],
            override.get("topicType") == "partitioned",
            partitions if partitions is not None else config.default_num_partitions,
        )
    return AutoTopicCreation(
        config.allow_auto_topic_creation,
        config.allow_auto_topic_creation_type == "partitioned",
        config.default_num_partitions,
    )
