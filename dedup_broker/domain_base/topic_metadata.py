"""What a topic holds besides its messages and policies: its properties (Pulsar's topic
properties, given at creation or later) and when it was created through the admin API.

Kept with the topic's policies (a partition shares its partitioned topic's), and
forgotten with them when the topic is deleted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dedup_broker.domain_base.names import TopicName
    from dedup_broker.domain_base.policies import Policies

__all__ = [
    "created_ms",
    "record_creation",
    "remove_topic_property",
    "topic_properties",
    "update_topic_properties",
]

PROPERTIES = "properties"
CREATED_MS = "created_ms"


def topic_properties(policies: Policies, topic: TopicName) -> dict[str, str]:
    stored = policies.topic_value(topic, PROPERTIES)
    return dict(stored) if isinstance(stored, dict) else {}


async def update_topic_properties(
    policies: Policies, topic: TopicName, properties: dict[str, str]
) -> None:
    """Adds ``properties`` to the topic's (a key given again takes the new value)."""
    merged = {**topic_properties(policies, topic), **properties}
    await policies.set_topic_value(topic, PROPERTIES, merged)


async def remove_topic_property(policies: Policies, topic: TopicName, key: str) -> None:
    remaining = {k: v for k, v in topic_properties(policies, topic).items() if k != key}
    await policies.set_topic_value(topic, PROPERTIES, remaining or None)


async def record_creation(
    policies: Policies, topic: TopicName, properties: dict[str, str] | None
) -> None:
    """The topic was created now (``topicCreationTimeStamp``), with ``properties``."""
    await policies.set_topic_value(topic, CREATED_MS, int(time.time() * 1000))
    if properties:
        await update_topic_properties(policies, topic, properties)


def created_ms(policies: Policies, topic: TopicName) -> int | None:
    """When the admin API created the topic (or its partitioned topic), if it did."""
    stored = policies.topic_value(topic, CREATED_MS)
    return stored if isinstance(stored, int) else None
