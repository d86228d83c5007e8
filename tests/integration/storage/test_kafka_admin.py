"""The storage layer's admin client: topic creation, deletion and end-offset queries, many
at once in shared requests."""

from __future__ import annotations

import asyncio

from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from dedup_broker.errors import StorageError
from dedup_broker.storage.kafka.admin import KafkaAdmin
from tests.integration.storage.helpers import ConfigFactory, run


def test_concurrent_creations_each_get_their_own_answer(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    """Creations asked for together go in shared requests; each caller still learns
    whether its topic was new, and each topic gets its own configuration."""
    config = make_config()
    prefix = f"{config.cluster_name}.created"

    async def scenario() -> None:
        kafka = KafkaAdmin(config)
        names = [f"{prefix}-{i:03d}" for i in range(60)]
        created = await asyncio.gather(
            *(
                kafka.create_topic(name, {"retention.ms": str(60_000 + i)})
                for i, name in enumerate(names)
            )
        )
        assert created == [True] * 60
        # Asked again (twice at once for one of them): they exist now.
        again = await asyncio.gather(
            kafka.create_topic(names[0], {}),
            kafka.create_topic(names[0], {}),
            kafka.create_topic(names[1], {}),
        )
        assert again == [False, False, False]
        # The same new topic asked for twice at once: one creates it, the other finds it.
        twice = await asyncio.gather(
            kafka.create_topic(f"{prefix}-twice", {}), kafka.create_topic(f"{prefix}-twice", {})
        )
        assert sorted(twice) == [False, True]
        # A broker lists what its copy of the metadata holds, a moment behind its controller.
        expected = {*names, f"{prefix}-twice"}
        assert await settled(kafka, f"{prefix}-", expected) == expected

    run(scenario)
    resource = ConfigResource(ConfigResource.Type.TOPIC, f"{prefix}-017")
    described = admin.describe_configs([resource])[resource].result()
    assert described["retention.ms"].value == "60017"


async def settled(kafka: KafkaAdmin, prefix: str, expected: set[str]) -> set[str]:
    """Topics named ``prefix...``, once they are ``expected`` or 30 s passed (a broker
    learns of a creation or deletion its controller committed a moment later)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        found = {t for t in await kafka.list_topics() if t.startswith(prefix)}
        if found == expected or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.2)


def test_concurrent_deletions_each_get_their_own_answer(make_config: ConfigFactory) -> None:
    """Deletions asked for together go in shared requests: every topic is gone, and each
    caller learns whether its topic existed."""
    config = make_config()
    prefix = f"{config.cluster_name}.deleted"

    async def scenario() -> None:
        kafka = KafkaAdmin(config)
        names = [f"{prefix}-{i:03d}" for i in range(80)]
        assert await asyncio.gather(*(kafka.create_topic(name, {}) for name in names)) == [
            True
        ] * len(names)
        kept = f"{prefix}-kept"
        await kafka.create_topic(kept, {})
        deleted = await asyncio.gather(
            *(kafka.delete_topic(name) for name in names),
            kafka.delete_topic(f"{prefix}-never-created"),
        )
        assert deleted == [True] * len(names) + [False]
        assert await settled(kafka, prefix, {kept}) == {kept}
        # Existence asked for many topics at once (shared DescribeTopics requests).
        exists = await asyncio.gather(*(kafka.topic_exists(t) for t in [kept, *names, kept]))
        assert exists == [True] + [False] * len(names) + [True]
        # Gone already: not an error for delete_topics, False for delete_topic.
        await kafka.delete_topics([*names[:5], kept])
        assert await kafka.delete_topic(names[0]) is False
        assert await settled(kafka, prefix, set()) == set()

    run(scenario)


def test_a_topic_created_a_moment_ago_exists_while_brokers_still_learn_of_it(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    """Right after thousands of creations a broker's metadata lags its controller (seen:
    up to a minute); the topics exist all the same, and one never created does not."""
    config = make_config()
    prefix = f"{config.cluster_name}.burst"
    names = [f"{prefix}-{i:04d}" for i in range(1500)]
    for start in range(0, len(names), 500):
        futures = admin.create_topics(
            [NewTopic(name, 1, 1) for name in names[start : start + 500]], operation_timeout=60
        )
        for future in futures.values():
            future.result()

    async def scenario() -> None:
        kafka = KafkaAdmin(config)
        checked = [names[-1], names[-2], names[0], f"{prefix}-never"]
        assert await asyncio.gather(*(kafka.topic_exists(t) for t in checked)) == [
            True,
            True,
            True,
            False,
        ]
        await kafka.delete_topics(names)
        assert await settled(kafka, prefix, set()) == set()

    run(scenario)


def test_ends_asked_together_each_get_their_own_answer(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    """End offsets asked for in one turn go to Kafka as one request; each caller gets its
    own partition's end (read-committed or not), and a topic that does not exist fails
    only its own caller."""
    config = make_config()
    prefix = f"{config.cluster_name}.ends"
    names = [f"{prefix}-{i:02d}" for i in range(12)]
    pending = f"{prefix}-pending"

    async def scenario() -> None:
        kafka = KafkaAdmin(config)
        await asyncio.gather(*(kafka.create_topic(name, {}) for name in [*names, pending]))
        writer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i, name in enumerate(names):
            for _ in range(i):
                writer.produce(name, b"x")
        assert writer.flush(10) == 0
        # Two committed records and the commit's marker, then a transaction left open
        # with three more.
        open_txn = Producer(
            {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{pending}.txn"}
        )
        open_txn.init_transactions(10)
        open_txn.begin_transaction()
        open_txn.produce(pending, b"committed")
        open_txn.produce(pending, b"committed")
        open_txn.commit_transaction(10)
        open_txn.begin_transaction()
        for _ in range(3):
            open_txn.produce(pending, b"open")
        assert open_txn.flush(10) == 0

        ends = await asyncio.gather(*(kafka.high_watermark(name) for name in names))
        assert ends == list(range(12))
        twice = await asyncio.gather(kafka.high_watermark(names[5]), kafka.high_watermark(names[5]))
        assert twice == [5, 5]
        visible, stable = await asyncio.gather(
            kafka.high_watermark(pending), kafka.stable_end(pending)
        )
        assert (visible, stable) == (6, 3)
        answers = await asyncio.gather(
            kafka.high_watermark(names[3]),
            kafka.high_watermark(f"{prefix}-missing"),
            kafka.stable_end(names[7]),
            return_exceptions=True,
        )
        assert answers[0] == 3 and answers[2] == 7
        assert isinstance(answers[1], StorageError)
        open_txn.abort_transaction(10)

    run(scenario)
