"""The broker's Kafka readers: fresh consumers in place of ones that learned many topics;
a failed metadata request before a read does not fail the read."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from dedup_broker.storage.kafka import reader as reader_module
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader, ValuesVisitor
from tests.integration.storage.helpers import ConfigFactory, run

TOPICS = 5
RECORDS = 4


def test_reads_stay_exact_across_consumer_renewals(
    make_config: ConfigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a consumer renewed after every second topic it learns, fetches and scans of
    many topics, each read twice, return exactly each topic's records."""
    monkeypatch.setattr(reader_module, "_MAX_KNOWN_TOPICS", 2)
    config = make_config(kafka_reader_pool_size=1)
    names = [f"{config.cluster_name}.read-{i}" for i in range(TOPICS)]

    async def scenario() -> None:
        admin = KafkaAdmin(config)
        await asyncio.gather(*(admin.create_topic(name, {}) for name in names))
        producer = SharedProducer(config, asyncio.get_running_loop())
        reader = KafkaReader(config)
        try:
            for name in names:
                for n in range(RECORDS):
                    await producer.send(name, f"{name}:{n}".encode())
            expected = [f"{name}:{n}".encode() for name in names for n in range(RECORDS)]
            for _ in range(2):
                fetched = [
                    record.value
                    for name in names
                    for record in await reader.fetch(name, 0, RECORDS)
                ]
                assert fetched == expected
                scanned: list[bytes] = []
                for name in names:
                    end = await reader.scan(name, 0, RECORDS, _collect_into(scanned))
                    assert end == RECORDS
                assert scanned == expected
        finally:
            reader.close()
            await producer.close()

    run(scenario)


class _NoMetadataConsumer(Consumer):
    """Its metadata requests fail as when Kafka is busy (``Broker transport failure``)."""

    def list_topics(self, *args: object, **kwargs: object) -> object:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))


def test_a_failed_metadata_request_does_not_fail_the_read(
    make_config: ConfigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata request a reader sends before its first read of a topic only speeds
    the read up: when it fails the records are read all the same (a deletion worker died
    of that error when it came out of a read)."""
    config = make_config(kafka_reader_pool_size=1)
    name = f"{config.cluster_name}.read-no-metadata"
    monkeypatch.setattr(reader_module, "Consumer", _NoMetadataConsumer)

    async def scenario() -> None:
        admin = KafkaAdmin(config)
        await admin.create_topic(name, {})
        producer = SharedProducer(config, asyncio.get_running_loop())
        reader = KafkaReader(config)
        try:
            for n in range(RECORDS):
                await producer.send(name, f"{n}".encode())
            fetched = [record.value for record in await reader.fetch(name, 0, RECORDS)]
            assert fetched == [f"{n}".encode() for n in range(RECORDS)]
            scanned: list[bytes] = []
            assert await reader.scan(name, 0, RECORDS, _collect_into(scanned)) == RECORDS
            assert scanned == fetched
        finally:
            reader.close()
            await producer.close()

    run(scenario)


def _collect_into(values: list[bytes]) -> ValuesVisitor:
    def visit(_first: int, more: list[bytes]) -> None:
        values.extend(more)

    return visit
