"""The broker's Kafka producers: records of many topics interleaved, each topic's in order."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from dedup_broker.storage.kafka import producer as producer_module
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.common import max_record_bytes
from dedup_broker.storage.kafka.polled_producer import IN_FLIGHT_RECORDS
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, read_topic, run, wait_until

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


def test_a_renewed_producer_keeps_each_topics_records_in_order(
    make_config: ConfigFactory,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Told it is done with enough topics, the producer is renewed while a busy topic has
    records in flight: that topic's later records wait for its earlier ones, every record
    lands once and in order, and the old producer's thread ends."""
    monkeypatch.setattr(producer_module, "RENEW_AFTER_FORGOTTEN", 3)
    config = make_config(kafka_producer_pool_size=1)
    busy = f"{config.cluster_name}.busy"
    done = [f"{config.cluster_name}.done-{i}" for i in range(4)]

    async def scenario() -> None:
        admin = KafkaAdmin(config)
        await asyncio.gather(*(admin.create_topic(name, {}) for name in [busy, *done]))
        producer = SharedProducer(config, asyncio.get_running_loop())
        try:
            for name in done:
                assert await producer.send(name, b"only") == 0
            before = [producer.send(busy, f"{n}".encode()) for n in range(RECORDS)]
            with caplog.at_level(logging.INFO, logger=producer_module.__name__):
                for name in done:
                    producer.forget(name)
            assert "renewing Kafka producer 0" in caplog.text
            after = [producer.send(busy, f"{n}".encode()) for n in range(RECORDS, 2 * RECORDS)]
            assert [await f for f in before + after] == list(range(2 * RECORDS))
            assert await producer.send(done[0], b"again") == 1
            for _ in range(100):
                if _poll_threads() == 1:
                    break
                await asyncio.sleep(0.1)
            assert _poll_threads() == 1
        finally:
            await producer.close()

    run(scenario)
    values = [record.value() for record in read_topic(kafka_bootstrap, busy)]
    assert values == [f"{n}".encode() for n in range(2 * RECORDS)]


def _poll_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "kafka-producer-poll-0")


def test_idle_ledgers_leave_the_producer_and_take_appends_again(
    make_config: ConfigFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ledgers not written to for ``kafkaProducerIdleTopicSeconds`` are dropped from the
    producer, which is renewed; appends after that go on in the same ledgers, in order."""
    monkeypatch.setattr(producer_module, "RENEW_AFTER_FORGOTTEN", 2)
    config = make_config(kafka_producer_pool_size=1, kafka_producer_idle_topic_seconds=1)
    names = [f"idle-{i}" for i in range(3)]

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ledgers = [await storage.open_managed_ledger(name) for name in names]
            before = [[await ml.append(b"%d" % n, 0) for n in range(2)] for ml in ledgers]
            assert all(storage.entry_cache.get(p) for ps in before for p in ps)
            with caplog.at_level(logging.INFO, logger=producer_module.__name__):
                await wait_until(lambda: "renewing Kafka producer 0" in caplog.text)
            # An idle ledger's last entries leave the entry cache too (nobody tails them).
            await wait_until(
                lambda: not any(storage.entry_cache.get(p) for ps in before for p in ps)
            )
            for ml, positions in zip(ledgers, before, strict=True):
                ledger_id = positions[0].ledger_id
                after = [await ml.append(b"%d" % n, 0) for n in range(2, 4)]
                assert [p.ledger_id for p in positions + after] == [ledger_id] * 4
                assert [p.entry_id for p in positions + after] == [0, 1, 2, 3]
                entries = await ml.read_entries(positions[0], 10)
                assert [e.data for e in entries] == [b"0", b"1", b"2", b"3"]
        finally:
            await storage.close()

    run(scenario)


class _Offsets:
    """A delivery handler that keeps the reported offsets, in report order."""

    def __init__(self, reported: list[tuple[int, int]], index: int) -> None:
        self._reported = reported
        self._index = index

    def on_delivery(self, error: object, offset: int) -> None:
        assert error is None, error
        self._reported.append((self._index, offset))


@pytest.mark.parametrize("closing", [False, True], ids=["acknowledged", "closed at once"])
def test_a_ledgers_records_wait_for_five_in_flight_and_follow_in_order(
    make_config: ConfigFactory, kafka_bootstrap: str, closing: bool
) -> None:
    """A single-partition topic's records beyond five unacknowledged wait outside
    librdkafka (whose thread would poll without sleeping meanwhile), then follow in step
    with the acknowledgements: every record lands once, at its own offset, in order; a
    producer closed at once still writes the waiting ones. A multi-partition topic's
    records all go to librdkafka at once."""
    config = make_config(kafka_producer_pool_size=1)
    ledger, table = f"{config.cluster_name}.paced", f"{config.cluster_name}.table"
    count = 400

    async def scenario() -> None:
        admin = KafkaAdmin(config)
        await admin.create_topic(ledger, {"max.message.bytes": str(max_record_bytes(config))})
        await admin.create_topic(table, {}, partitions=3)
        producer = SharedProducer(config, asyncio.get_running_loop())
        reported: list[tuple[int, int]] = []
        try:
            for n in range(count):
                producer.produce(
                    ledger, b"%d" % n + bytes(4000), _Offsets(reported, n), single_partition=True
                )
            librdkafka = producer._shards[0].current.producer
            assert len(librdkafka) == IN_FLIGHT_RECORDS
            unpaced = [producer.send(table, b"x", key=b"%d" % n) for n in range(count)]
            # Not paced: far more than five each (the polling thread may have served the
            # reports of some already).
            assert 2 * IN_FLIGHT_RECORDS < len(librdkafka) <= IN_FLIGHT_RECORDS + count
            if closing:
                await producer.close()
            await wait_until(lambda: len(reported) == count)
            await asyncio.gather(*unpaced)
        finally:
            await producer.close()
        assert reported == [(n, n) for n in range(count)]

    run(scenario)
    values = [record.value() for record in read_topic(kafka_bootstrap, ledger)]
    assert values == [b"%d" % n + bytes(4000) for n in range(count)]
