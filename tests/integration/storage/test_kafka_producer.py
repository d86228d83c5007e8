"""The broker's Kafka producers: records of many topics interleaved, each topic's in order."""

from __future__ import annotations

import asyncio

from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.producer import SharedProducer
from tests.integration.storage.helpers import ConfigFactory, read_topic, run

TOPICS = 12
RECORDS = 25


def test_records_of_many_topics_through_the_pool_stay_in_order(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    """Records of many topics, interleaved, through several producers: every record is
    acknowledged at its own offset, and each topic holds its records in the order sent."""
    config = make_config(kafka_producer_pool_size=3)
    names = [f"{config.cluster_name}.pool-{i:02d}" for i in range(TOPICS)]

    async def scenario() -> None:
        admin = KafkaAdmin(config)
        await asyncio.gather(*(admin.create_topic(name, {}) for name in names))
        producer = SharedProducer(config, asyncio.get_running_loop())
        try:
            sent = [
                (name, producer.send(name, f"{name}:{n}".encode()))
                for n in range(RECORDS)
                for name in names
            ]
            offsets: dict[str, list[int]] = {name: [] for name in names}
            for name, future in sent:
                offsets[name].append(await future)
            assert offsets == {name: list(range(RECORDS)) for name in names}
        finally:
            await producer.close()

    run(scenario)
    for name in names:
        values = [record.value() for record in read_topic(kafka_bootstrap, name)]
        assert values == [f"{name}:{n}".encode() for n in range(RECORDS)]
