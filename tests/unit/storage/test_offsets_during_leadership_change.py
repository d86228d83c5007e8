"""Offset queries while Kafka's partition leadership settles (after Kafka was frozen or
restarted): answers such as UNKNOWN_LEADER_EPOCH are asked again until they pass, while
any other failure still fails after a few attempts."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import StorageError
from dedup_broker.storage.kafka import admin as admin_module
from dedup_broker.storage.kafka.admin import LIST_OFFSETS_ATTEMPTS, KafkaAdmin


class _Offset:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class FailingOffsetsClient:
    """Answers ListOffsets with the given errors, one request each, then with ``end``."""

    def __init__(self, failures: list[int], end: int) -> None:
        self.failures = failures
        self.end = end
        self.requests = 0

    def list_offsets(
        self, request: dict[TopicPartition, Any], **_: Any
    ) -> dict[TopicPartition, concurrent.futures.Future[_Offset]]:
        self.requests += 1
        answers: dict[TopicPartition, concurrent.futures.Future[_Offset]] = {}
        code = self.failures.pop(0) if self.failures else None
        for tp in request:
            future: concurrent.futures.Future[_Offset] = concurrent.futures.Future()
            if code is None:
                future.set_result(_Offset(self.end))
            else:
                future.set_exception(KafkaException(KafkaError(code, "refused")))
            answers[tp] = future
        return answers

    def list_topics(self, topic: str, timeout: float) -> None:
        return None


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_module, "_LIST_OFFSETS_FIRST_DELAY_S", 0.001)
    monkeypatch.setattr(admin_module, "_LIST_OFFSETS_MAX_DELAY_S", 0.002)


def admin_with(client: FailingOffsetsClient) -> KafkaAdmin:
    admin = KafkaAdmin(BrokerConfig(kafka_bootstrap_servers="127.0.0.1:9"))
    admin._client = client
    admin._ends._client = client
    return admin


async def test_a_leader_epoch_refusal_is_asked_again_past_the_usual_attempts() -> None:
    refusals = [KafkaError.UNKNOWN_LEADER_EPOCH] * (LIST_OFFSETS_ATTEMPTS + 4)
    client = FailingOffsetsClient(refusals, end=42)
    assert await admin_with(client).stable_end("demo.policies") == 42
    # One batched request, then one on its own per refusal left.
    assert client.requests == LIST_OFFSETS_ATTEMPTS + 5


async def test_leadership_refusals_stop_being_asked_once_patience_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin_module, "LEADERSHIP_PATIENCE_S", 0.0)
    client = FailingOffsetsClient([KafkaError.NOT_LEADER_FOR_PARTITION] * 100, end=1)
    with pytest.raises(StorageError, match="NOT_LEADER"):
        await admin_with(client).high_watermark("demo.ledger.7")
    assert client.requests == 1 + LIST_OFFSETS_ATTEMPTS


async def test_any_other_refusal_fails_after_the_usual_attempts() -> None:
    client = FailingOffsetsClient([KafkaError.TOPIC_AUTHORIZATION_FAILED] * 100, end=1)
    with pytest.raises(StorageError, match="TOPIC_AUTHORIZATION_FAILED"):
        await admin_with(client).high_watermark("demo.ledger.7")
    assert client.requests == 1 + LIST_OFFSETS_ATTEMPTS
