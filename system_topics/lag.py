"""Estimated deletions in flight: the worker group's lag over the main and RETRY topics."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition

from system_topics.topics import DeletionTopics


def group_lag(bootstrap: str, topics: DeletionTopics, timeout: float = 10.0) -> dict[str, int]:
    """Records not yet committed by the worker group, per topic (main, retry)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topics.group,
            "client.id": f"lag-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=timeout)
        result: dict[str, int] = {}
        for topic in (topics.main, topics.retry):
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                result[topic] = 0
                continue
            partitions = [TopicPartition(topic, p) for p in sorted(described.partitions)]
            committed = consumer.committed(partitions, timeout=timeout)
            lag = 0
            for tp in committed:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, tp.partition), timeout=timeout
                )
                position = tp.offset if tp.offset >= 0 else low
                lag += max(high - position, 0)
            result[topic] = lag
        return result
    finally:
        consumer.close()
