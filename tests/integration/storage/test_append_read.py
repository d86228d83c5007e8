"""Appends, rollover and reads of managed ledgers on the real Kafka."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from dedup_broker.storage import formats
from dedup_broker.storage import storage_pb2 as pb
from dedup_broker.storage.api import Entry, LedgerInfo, Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, read_topic, run, wait_until

SMALL_LEDGERS = {
    "managed_ledger_max_entries_per_ledger": 5,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
}


def test_round_trip_in_order_across_ledgers(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config(**SMALL_LEDGERS))
        try:
            ml = await storage.open_managed_ledger("tenant/ns/persistent/orders")
            futures = [ml.append(f"entry-{i}".encode(), 1_000_000 + i) for i in range(23)]
            completion: list[int] = []

            def record(index: int) -> Callable[[asyncio.Future[Position]], None]:
                return lambda _f: completion.append(index)

            for i, future in enumerate(futures):
                future.add_done_callback(record(i))
            positions = await asyncio.gather(*futures)
            assert completion == list(range(23))

            ledger_ids = sorted({p.ledger_id for p in positions})
            assert len(ledger_ids) == 5
            expected = [Position(ledger_ids[i // 5], i % 5) for i in range(23)]
            assert positions == expected
            assert ml.last_confirmed == Position(ledger_ids[4], 2)
            assert ml.number_of_entries() == 23
            assert ml.entries_added == 23
            infos = ml.ledgers()
            assert [(i.ledger_id, i.entries) for i in infos] == [
                *((lid, 5) for lid in ledger_ids[:4]),
                (ledger_ids[4], -1),
            ]
            sizes = [len(f"entry-{i}".encode()) for i in range(23)]
            assert [i.size for i in infos] == [sum(sizes[k : k + 5]) for k in range(0, 23, 5)]
            assert all(i.timestamp_ms > 0 for i in infos[:4]) and infos[4].timestamp_ms == 0
            assert ml.total_size == sum(len(f"entry-{i}".encode()) for i in range(23))

            assert ml.next_position(Position(ledger_ids[0], 4)) == Position(ledger_ids[1], 0)
            assert ml.previous_position(Position(ledger_ids[1], 0)) == Position(ledger_ids[0], 4)
            assert ml.first_position() == Position(ledger_ids[0], 0)
            assert ml.entries_between(Position(ledger_ids[0], 3), Position(ledger_ids[2], 1)) == 9

            entries = await ml.read_entries(ml.first_position(), 100)
            assert entries == [
                Entry(expected[i], f"entry-{i}".encode(), 1_000_000 + i) for i in range(23)
            ]
            middle = await ml.read_entries(Position(ledger_ids[1], 3), 4)
            assert [e.data for e in middle] == [b"entry-8", b"entry-9", b"entry-10", b"entry-11"]
            assert await ml.read_entries(ml.next_position(ml.last_confirmed), 10) == []
        finally:
            await storage.close()

    run(scenario)


def test_rollover_by_size(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        config = make_config(
            managed_ledger_max_size_per_ledger_mbytes=1,
            managed_ledger_min_ledger_rollover_time_minutes=0,
        )
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("big")
            payload = b"z" * (300 * 1024)
            positions = await asyncio.gather(*(ml.append(payload, 0) for _ in range(10)))
            # A ledger is full once it holds >= 1 MiB: after the 4th 300 KiB entry.
            assert [p.entry_id for p in positions] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
            infos = ml.ledgers()
            assert [i.entries for i in infos] == [4, 4, -1]
            assert [i.size for i in infos] == [4 * len(payload), 4 * len(payload), 2 * len(payload)]
        finally:
            await storage.close()

    run(scenario)


def test_rollover_waits_for_min_age_then_max_age_rolls_over(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        config = make_config(
            managed_ledger_max_entries_per_ledger=2,
            managed_ledger_min_ledger_rollover_time_minutes=0.5 / 60,  # 0.5 s
            managed_ledger_max_ledger_rollover_time_minutes=1.5 / 60,  # 1.5 s
        )
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("aged")
            first = await asyncio.gather(*(ml.append(b"a", 0) for _ in range(4)))
            # Full after 2 entries but younger than the minimum age: no rollover yet.
            assert {p.ledger_id for p in first} == {first[0].ledger_id}
            await wait_until(lambda: len(ml.ledgers()) == 2, timeout=10)
            assert ml.ledgers()[0] == LedgerInfo(
                first[0].ledger_id, 4, 4, ml.ledgers()[0].timestamp_ms
            )
            one = await ml.append(b"b", 0)
            assert one.ledger_id == ml.ledgers()[1].ledger_id
            # One entry, never full: the maximum age closes it anyway.
            await wait_until(lambda: len(ml.ledgers()) == 3, timeout=10)
            assert ml.ledgers()[1].entries == 1
        finally:
            await storage.close()

    run(scenario)


def test_reads_from_kafka_after_the_cache_is_evicted(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config(**SMALL_LEDGERS))
        try:
            ml = await storage.open_managed_ledger("evicted")
            data = [bytes([i]) * (i + 1) for i in range(12)]
            positions = [await ml.append(d, 5000 + i) for i, d in enumerate(data)]
            cache = storage.entry_cache
            cached = await ml.read_entries(positions[0], 12)
            assert cache.misses == 0
            cache.clear()
            from_kafka = await ml.read_entries(positions[0], 12)
            assert cache.misses == 3  # one run per ledger
            assert from_kafka == cached
            assert [e.data for e in from_kafka] == data
            assert [e.timestamp_ms for e in from_kafka] == [5000 + i for i in range(12)]
            # Entries read from Kafka are cached for the next reader.
            hits = cache.hits
            assert await ml.read_entry(positions[7]) == from_kafka[7]
            assert cache.hits == hits + 1
        finally:
            await storage.close()

    run(scenario)


def test_reads_without_a_cache_and_byte_limits(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(
            make_config(managed_ledger_cache_size_mb=0, **SMALL_LEDGERS)
        )
        try:
            ml = await storage.open_managed_ledger("uncached")
            sizes = [100, 100, 300, 50, 50, 50, 2000]
            positions = await asyncio.gather(*(ml.append(b"q" * n, 0) for n in sizes))
            start = positions[0]
            assert [len(e.data) for e in await ml.read_entries(start, 10, max_bytes=250)] == [
                100,
                100,
            ]
            # At least one entry, even when it alone exceeds max_bytes.
            big = await ml.read_entries(positions[6], 10, max_bytes=10)
            assert [e.position for e in big] == [positions[6]]
            assert [len(e.data) for e in await ml.read_entries(positions[2], 3)] == [300, 50, 50]
            assert len(storage.entry_cache) == 0
        finally:
            await storage.close()

    run(scenario)


def test_entries_listener(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config())
        try:
            ml = await storage.open_managed_ledger("listened")
            seen: list[Position] = []

            def listener() -> None:
                seen.append(ml.last_confirmed)

            ml.add_entries_listener(listener)
            last = (await asyncio.gather(*(ml.append(b"x", 0) for _ in range(50))))[-1]
            await wait_until(lambda: bool(seen) and seen[-1] == last)
            assert 1 <= len(seen) <= 50
            ml.remove_entries_listener(listener)
            count = len(seen)
            await ml.append(b"y", 0)
            await asyncio.sleep(0.05)
            assert len(seen) == count
        finally:
            await storage.close()

    run(scenario)


def test_find_position_by_time(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config(**SMALL_LEDGERS))
        try:
            ml = await storage.open_managed_ledger("timed")
            base = int(time.time() * 1000)
            positions = [await ml.append(b"t", base + 1000 * i) for i in range(12)]
            assert await ml.find_position_by_time(base + 2500) == positions[3]
            assert await ml.find_position_by_time(base + 5000) == positions[5]
            assert await ml.find_position_by_time(base + 9001) == positions[10]
            assert await ml.find_position_by_time(base - 60_000) == positions[0]
            assert await ml.find_position_by_time(base + 11_001) == ml.next_position(positions[11])
        finally:
            await storage.close()

    run(scenario)


def test_ledger_topics_headers_keys_and_ids(
    make_config: ConfigFactory, kafka_bootstrap: str, admin: AdminClient
) -> None:
    config = make_config(**SMALL_LEDGERS)
    ledgers: list[int] = []
    broker: list[str] = []

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("headed")
            positions = [await ml.append(b"abc" * (i + 1), 7000 + i) for i in range(7)]
            ledgers.extend(sorted({p.ledger_id for p in positions}))
            broker.append(storage.broker_id)
            meta = await storage.ledger_store.read_metadata(positions[0].ledger_id)
            assert meta is not None and meta.managed_ledger_name == "headed"
        finally:
            await storage.close()

    run(scenario)
    first, second = ledgers
    topic = f"{config.cluster_name}.ledger.{first}"
    records = read_topic(kafka_bootstrap, topic)
    header = records[0]
    assert header.offset() == 0
    assert header.headers() == [("dedup-broker-ledger-metadata", b"1")]
    meta = formats.decode_ledger_metadata(header.value() or b"")
    assert (meta.ledger_id, meta.managed_ledger_name, meta.component) == (
        first,
        "headed",
        "MANAGED_LEDGER",
    )
    assert meta.created_by == broker[0] and meta.cursor_name == ""
    assert abs(meta.created_ms - time.time() * 1000) < 120_000
    entries = records[1:]
    assert [m.value() for m in entries] == [b"abc" * (i + 1) for i in range(5)]
    assert [m.timestamp()[1] for m in entries] == [7000 + i for i in range(5)]
    assert [formats.decode_entry_key(m.key()) for m in entries] == [
        formats.EntryKey(size, entry_id) for entry_id, size in enumerate([3, 9, 18, 30, 45])
    ]

    # One partition and the retention the broker relies on.
    metadata = admin.list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    settings = admin.describe_configs([resource])[resource].result()
    assert settings["cleanup.policy"].value == "delete"
    assert settings["retention.ms"].value == "-1"
    assert settings["retention.bytes"].value == "-1"

    # The ids are offsets of allocation records naming who allocated them.
    allocations = read_topic(kafka_bootstrap, f"{config.cluster_name}.ledger-ids")
    by_offset = {m.offset(): m for m in allocations}
    for ledger_id in (first, second):
        record = pb.LedgerIdAllocation.FromString(by_offset[ledger_id].value() or b"")
        assert record.allocated_by == broker[0]
        assert record.managed_ledger_name == "headed"


def test_many_appends_in_flight_get_distinct_positions_in_order(
    make_config: ConfigFactory,
) -> None:
    """20,000 small appends in flight at once (acks=all) each get their own position, in
    the order they were made (their speed is ``make bench``'s to measure)."""

    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config())
        try:
            ml = await storage.open_managed_ledger("fast")
            await ml.append(b"warm-up", 0)
            count = 20_000
            positions = await asyncio.gather(*(ml.append(b"m" * 100, 0) for _ in range(count)))
            assert positions == sorted(positions) and len(set(positions)) == count
            assert ml.number_of_entries() == count + 1
        finally:
            await storage.close()

    run(scenario)


def test_largest_entries_and_empty_entries(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        config = make_config()
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("large")
            big = bytes(range(256)) * (config.max_message_size // 256)
            assert len(big) == 5 * 1024 * 1024
            positions = await asyncio.gather(
                ml.append(big, 0), ml.append(b"", 0), ml.append(big[::-1], 0)
            )
            storage.entry_cache.clear()
            entries = await ml.read_entries(positions[0], 3, max_bytes=16 * 1024 * 1024)
            assert [e.data for e in entries] == [big, b"", big[::-1]]
            assert ml.total_size == 2 * len(big)
        finally:
            await storage.close()

    run(scenario)
