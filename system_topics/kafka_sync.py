"""Blocking Kafka reads and admin calls for the worker and the doctor (no event loop)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from dedup_broker.errors import StorageError


class SyncKafka:
    def __init__(self, bootstrap: str, client_id: str, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self.admin_bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": client_id})
        self._reader = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "group.id": f"{client_id}-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "allow.auto.create.topics": False,
            }
        )

    def close(self) -> None:
        self._reader.close()

    def topic_exists(self, topic: str) -> bool:
        metadata = self.admin.list_topics(topic, timeout=self.timeout_s)
        described = metadata.topics.get(topic)
        if described is None:
            return False
        error = described.error
        if error is None:
            return True
        if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return False
        raise StorageError(f"describe {topic}: {error}")

    def list_topics(self) -> list[str]:
        return sorted(self.admin.list_topics(timeout=self.timeout_s).topics)

    def partitions(self, topic: str) -> list[int]:
        described = self.admin.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
        if described is None or described.error is not None:
            return []
        return sorted(described.partitions)

    def watermarks(self, topic: str, partition: int = 0) -> tuple[int, int]:
        low, high = self._reader.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=self.timeout_s
        )
        return int(low), int(high)

    def read(self, topic: str, start: int, end: int, partition: int = 0) -> list[Message]:
        """Records with ``start <= offset < end`` (fewer if compacted or deleted)."""
        if end <= start:
            return []
        self._reader.assign([TopicPartition(topic, partition, start)])
        records: list[Message] = []
        deadline = time.monotonic() + self.timeout_s
        try:
            while time.monotonic() < deadline:
                msg = self._reader.poll(0.2)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise StorageError(f"read {topic}: {error}")
                offset = msg.offset()
                if offset is None or offset >= end:
                    break
                records.append(msg)
                if offset + 1 >= end:
                    break
            else:
                raise StorageError(f"read {topic}: timed out")
        finally:
            self._reader.unassign()
        return records

    def delete_topic(self, topic: str) -> bool:
        """Delete ``topic``; False if it did not exist."""
        futures = self.admin.delete_topics(
            [topic], operation_timeout=self.timeout_s, request_timeout=self.timeout_s
        )
        try:
            futures[topic].result()
        except KafkaException as exc:
            error: Any = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return False
            raise StorageError(f"delete {topic}: {exc}") from exc
        return True


class SyncTable:
    """A compacted metadata topic (one partition) read into memory, refreshed on demand."""

    def __init__(self, kafka: SyncKafka, topic: str) -> None:
        self._kafka = kafka
        self.topic = topic
        self._values: dict[str, bytes] = {}
        self._next = 0

    def refresh(self) -> None:
        _, high = self._kafka.watermarks(self.topic)
        while self._next < high:
            records = self._kafka.read(self.topic, self._next, high)
            if not records:
                break
            for msg in records:
                key = msg.key()
                if key is not None:
                    value = msg.value()
                    if value is None:
                        self._values.pop(key.decode("utf-8"), None)
                    else:
                        self._values[key.decode("utf-8")] = value
                self._next = int(msg.offset() or 0) + 1
        self._next = max(self._next, high)

    def get(self, key: str) -> bytes | None:
        return self._values.get(key)

    def items(self) -> list[tuple[str, bytes]]:
        return sorted(self._values.items())
