"""Whether a topic exists is Kafka's controller's answer, not a lagging broker's: a topic
a broker does not know yet is asked of the controller before it counts as gone."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from dedup_broker.config import BrokerConfig
from dedup_broker.storage.kafka.admin import KafkaAdmin


def answered(error: KafkaException | None) -> concurrent.futures.Future[None]:
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
    return future


UNKNOWN = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "unknown"))
EXISTS = KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "exists"))


class Kafka:
    """A broker whose metadata lags: it knows ``described``; the controller ``created``."""

    def __init__(self, described: set[str], created: set[str]) -> None:
        self.described, self.created = described, created
        self.validations: list[list[str]] = []

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Any]:
        return {t: answered(None if t in self.described else UNKNOWN) for t in topics.topic_names}

    def create_topics(self, topics: list[Any], validate_only: bool = False, **_: Any) -> Any:
        assert validate_only, "only checked, never created"
        self.validations.append([new.topic for new in topics])
        return {
            new.topic: answered(EXISTS if new.topic in self.created else None) for new in topics
        }

    def poll(self, timeout: float) -> int:
        return 0


async def test_a_topic_the_broker_does_not_know_yet_exists_if_the_controller_has_it() -> None:
    admin = KafkaAdmin(BrokerConfig(kafka_bootstrap_servers="127.0.0.1:9"))
    kafka = Kafka(described={"old"}, created={"old", "new"})
    admin._client = kafka  # type: ignore[assignment]
    admin._topics_client = kafka  # type: ignore[assignment]
    assert await admin.topic_exists("old") is True
    assert kafka.validations == []  # the broker knew it: no question to the controller
    assert await admin.topic_exists("new") is True  # created a moment ago
    assert await admin.topic_exists("gone") is False
    assert kafka.validations == [["new"], ["gone"]]
