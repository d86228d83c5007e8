"""Topic requests asked while one is in flight go together in the next, and each caller
gets its own topic's answer (created / existed, deleted / gone, or its own error)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
from confluent_kafka import KafkaError, KafkaException

from dedup_broker.errors import StorageError
from dedup_broker.storage.kafka.topic_batches import MAX_TOPICS_PER_REQUEST, TopicBatches

GONE = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "unknown"))
REFUSED = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed"))


class Kafka:
    """Answers each request at once: topics in ``answers`` get that error, others succeed."""

    def __init__(self, answers: dict[str, KafkaException] | None = None) -> None:
        self.answers = answers or {}
        self.requests: list[list[str]] = []
        self.refuse_next = False

    def send(self, topics: list[str]) -> dict[str, concurrent.futures.Future[None]]:
        self.requests.append(list(topics))
        if self.refuse_next:
            self.refuse_next = False
            raise ValueError("request refused")
        futures: dict[str, concurrent.futures.Future[None]] = {}
        for topic in topics:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            if topic in self.answers:
                future.set_exception(self.answers[topic])
            else:
                future.set_result(None)
            futures[topic] = future
        return futures


def deleted(topic: str, refusal: KafkaException | None) -> bool:
    if refusal is None:
        return True
    if refusal.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    raise StorageError(f"delete topic {topic}: {refusal}")


async def test_requests_asked_together_share_one_request_each_gets_its_answer() -> None:
    kafka = Kafka({"t-gone": GONE, "t-refused": REFUSED})
    batches = TopicBatches[str]("delete topics", kafka.send, deleted)
    names = [f"t-{i}" for i in range(50)]
    answers = await asyncio.gather(
        *(batches.ask(name, name) for name in [*names, "t-gone", "t-refused"]),
        return_exceptions=True,
    )
    # The first ask is sent on its own; everything asked meanwhile goes in the next one.
    assert len(kafka.requests) <= 2
    assert sorted(t for request in kafka.requests for t in request) == sorted(
        [*names, "t-gone", "t-refused"]
    )
    assert answers[:50] == [True] * 50
    assert answers[50] is False
    assert isinstance(answers[51], StorageError) and "t-refused" in str(answers[51])


async def test_the_same_topic_asked_twice_before_it_was_sent_is_sent_once() -> None:
    kafka = Kafka()
    batches = TopicBatches[str]("delete topics", kafka.send, deleted)
    answers = await asyncio.gather(batches.ask("t", "t"), batches.ask("t", "t"))
    assert sorted(answers) == [False, True]
    assert [t for request in kafka.requests for t in request] == ["t"]


async def test_a_refused_request_fails_its_topics_and_the_next_request_goes_out() -> None:
    kafka = Kafka()
    kafka.refuse_next = True
    batches = TopicBatches[str]("delete topics", kafka.send, deleted)
    with pytest.raises(StorageError, match="request refused"):
        await batches.ask("a", "a")
    assert await batches.ask("b", "b") is True


async def test_a_question_asked_twice_before_it_was_sent_gets_the_same_answer() -> None:
    kafka = Kafka({"missing": GONE})
    questions = TopicBatches[str]("describe topics", kafka.send, deleted, shared=True)
    answers = await asyncio.gather(
        questions.ask("there", "there"),
        questions.ask("there", "there"),
        questions.ask("missing", "missing"),
        questions.ask("missing", "missing"),
    )
    assert list(answers) == [True, True, False, False]
    assert sorted(t for request in kafka.requests for t in request) == ["missing", "there"]


async def test_a_request_carries_at_most_the_topics_kafka_accepts_at_once() -> None:
    kafka = Kafka()
    batches = TopicBatches[str]("create topics", kafka.send, deleted)
    count = 2 * MAX_TOPICS_PER_REQUEST + 7
    answers = await asyncio.gather(*(batches.ask(f"t-{i}", f"t-{i}") for i in range(count)))
    assert answers == [True] * count
    assert max(len(request) for request in kafka.requests) == MAX_TOPICS_PER_REQUEST
    assert sum(len(request) for request in kafka.requests) == count
