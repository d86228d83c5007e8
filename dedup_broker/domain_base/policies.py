"""Namespace and topic policies, stored in the compacted policies table.

Each feature names its own policies and decides their defaults; precedence is topic >
namespace > broker configuration, as in Pulsar. A partition follows the policies of its
partitioned topic.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dedup_broker.domain_base.names import TopicName

if TYPE_CHECKING:
    from dedup_broker.storage.api import MetadataTable

NAMESPACE_KEY = "namespace-policies/"
TOPIC_KEY = "topic-policies/"


class Policies:
    def __init__(self, table: MetadataTable) -> None:
        self.table = table

    def _read(self, key: str) -> dict[str, Any]:
        raw = self.table.get(key)
        return dict(json.loads(raw)) if raw else {}

    async def _write(self, key: str, name: str, value: object | None) -> None:
        policies = self._read(key)
        if value is None:
            policies.pop(name, None)
        else:
            policies[name] = value
        if policies:
            await self.table.put(key, json.dumps(policies, sort_keys=True).encode())
        elif self.table.get(key) is not None:
            await self.table.delete(key)

    @staticmethod
    def _topic_key(topic: TopicName) -> str:
        return TOPIC_KEY + str(topic.partitioned_base)

    def namespace_value(self, namespace: str, name: str) -> Any:
        return self._read(NAMESPACE_KEY + namespace).get(name)

    def topic_value(self, topic: TopicName, name: str) -> Any:
        return self._read(self._topic_key(topic)).get(name)

    async def set_namespace_value(self, namespace: str, name: str, value: object | None) -> None:
        await self._write(NAMESPACE_KEY + namespace, name, value)

    async def set_topic_value(self, topic: TopicName, name: str, value: object | None) -> None:
        await self._write(self._topic_key(topic), name, value)

    async def forget_topic(self, topic: TopicName) -> None:
        """The topic (a partitioned one with its partitions) was deleted: its policies go
        with it, as in Pulsar, so a topic made later under its name starts afresh."""
        key = self._topic_key(topic)
        if self.table.get(key) is not None:
            await self.table.delete(key)

    def effective(self, topic: TopicName, name: str) -> Any:
        """The topic's setting, else its namespace's; ``None`` when neither is set."""
        value = self.topic_value(topic, name)
        return value if value is not None else self.namespace_value(topic.namespace_name, name)
