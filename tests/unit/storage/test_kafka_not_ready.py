"""A broker that starts with a Kafka not ready yet: it waits for Kafka to be able to
create its topics instead of exiting, and still fails at once on a real error."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import KafkaNotReadyError, StorageError
from dedup_broker.storage.kafka import admin as admin_module
from dedup_broker.storage.kafka.admin import KafkaAdmin, creation_error

FENCED = "Unable to replicate the partition 1 time(s): All brokers are currently fenced."


def refusal(code: int, reason: str) -> KafkaException:
    return KafkaException(KafkaError(code, reason))


class RefusingTopicsClient:
    """Answers CreateTopics with the given refusals, one request each, then creates."""

    def __init__(self, refusals: list[KafkaException]) -> None:
        self.refusals = refusals
        self.requests = 0

    def create_topics(
        self, topics: list[Any], **_: Any
    ) -> dict[str, concurrent.futures.Future[None]]:
        self.requests += 1
        answers: dict[str, concurrent.futures.Future[None]] = {}
        for new in topics:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            if self.refusals:
                future.set_exception(self.refusals[0])
            else:
                future.set_result(None)
            answers[new.topic] = future
        if self.refusals:
            self.refusals.pop(0)
        return answers

    def poll(self, timeout: float) -> int:
        return 0


def admin_refusing(refusals: list[KafkaException]) -> tuple[KafkaAdmin, RefusingTopicsClient]:
    admin = KafkaAdmin(BrokerConfig(kafka_bootstrap_servers="127.0.0.1:9"))
    client = RefusingTopicsClient(refusals)
    admin._topics_client = client

    async def answers() -> bool:  # a Kafka that serves metadata, busy creating topics
        return True

    admin._answers = answers  # type: ignore[method-assign]
    return admin, client


def test_a_fenced_broker_or_a_busy_controller_is_kafka_not_ready() -> None:
    fenced = creation_error("t", refusal(KafkaError.INVALID_REPLICATION_FACTOR, FENCED))
    assert isinstance(fenced, KafkaNotReadyError)
    busy = refusal(KafkaError.REQUEST_TIMED_OUT, "Failed while waiting for controller")
    assert isinstance(creation_error("t", busy), KafkaNotReadyError)
    late = refusal(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out")
    assert isinstance(creation_error("t", late), KafkaNotReadyError)
    unreachable = refusal(KafkaError._TRANSPORT, "Connection refused")
    assert not isinstance(creation_error("t", unreachable), KafkaNotReadyError)
    too_many = refusal(
        KafkaError.INVALID_REPLICATION_FACTOR,
        "Replication factor: 3 larger than available brokers: 1.",
    )
    assert not isinstance(creation_error("t", too_many), KafkaNotReadyError)


async def test_a_starting_broker_waits_until_kafka_can_create_its_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin_module, "_START_RETRY_FIRST_S", 0.01)
    not_ready = [refusal(KafkaError.INVALID_REPLICATION_FACTOR, FENCED) for _ in range(3)]
    admin, client = admin_refusing(not_ready)
    assert await admin.create_topic_when_ready("system", {}) is True
    assert client.requests == 4


async def test_a_real_refusal_fails_the_start_at_once() -> None:
    too_many = "Replication factor: 3 larger than available brokers: 1."
    admin, client = admin_refusing([refusal(KafkaError.INVALID_REPLICATION_FACTOR, too_many)])
    with pytest.raises(StorageError, match="larger than available brokers") as raised:
        await admin.create_topic_when_ready("system", {})
    assert not isinstance(raised.value, KafkaNotReadyError)
    assert client.requests == 1


async def test_kafka_never_ready_fails_the_start_after_the_patience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin_module, "_START_RETRY_FIRST_S", 0.01)
    endless = [refusal(KafkaError.INVALID_REPLICATION_FACTOR, FENCED) for _ in range(1000)]
    admin, client = admin_refusing(endless)
    with pytest.raises(KafkaNotReadyError, match="currently fenced"):
        await admin.create_topic_when_ready("system", {}, patience_s=0.1)
    assert 1 < client.requests < 1000
