"""Durable and non-durable cursors on the real Kafka."""

from __future__ import annotations

import asyncio

from dedup_broker.errors import CursorNotFoundError
from dedup_broker.storage import formats
from dedup_broker.storage.api import Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, read_topic, run, wait_until

SMALL_LEDGERS = {
    "managed_ledger_max_entries_per_ledger": 4,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
}


def cursor_records(bootstrap: str, cluster: str, key: str) -> list[bytes | None]:
    """Values written for ``key`` to the cursor topic, in order (None = tombstone)."""
    return [
        m.value()
        for m in read_topic(bootstrap, f"{cluster}.cursors")
        if m.key() == key.encode("utf-8")
    ]


def test_cursor_state_survives_a_restart(make_config: ConfigFactory) -> None:
    config = make_config(**SMALL_LEDGERS)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        ml = await storage.open_managed_ledger("durable")
        positions = [await ml.append(f"m{i}".encode(), 0) for i in range(10)]
        cursor = await ml.cursors.open("sub", "earliest")
        assert cursor.mark_delete_position == Position(positions[0].ledger_id, -1)
        assert cursor.backlog() == 10
        cursor.mark_delete(positions[2], {"pulsar.seq.producer-a": 41, "n": -7})
        cursor.delete([positions[4], positions[5], positions[8]])
        read = await cursor.read_entries(3)
        assert [e.data for e in read] == [b"m3", b"m6", b"m7"]
        await storage.close()

        again = await KafkaStorage.start(config)
        try:
            ml2 = await again.open_managed_ledger("durable")
            assert ml2.cursors.stored_names() == ["sub"]
            restored = await ml2.cursors.open("sub")
            assert restored.mark_delete_position == positions[2]
            assert restored.persisted_mark_delete_position == positions[2]
            assert restored.properties == {"pulsar.seq.producer-a": 41, "n": -7}
            assert restored.individually_deleted_ranges() == [
                (positions[4], positions[5]),
                (positions[8], positions[8]),
            ]
            assert restored.backlog() == 4
            assert restored.read_position == positions[3]
            entries = await restored.read_entries(10)
            assert [e.data for e in entries] == [b"m3", b"m6", b"m7", b"m9"]
            assert restored.last_persisted_ms > 0
        finally:
            await again.close()

    run(scenario)


def test_acks_are_written_in_batches(make_config: ConfigFactory, kafka_bootstrap: str) -> None:
    config = make_config(managed_ledger_default_mark_delete_rate_limit=0.2)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("acked")
            positions = await asyncio.gather(*(ml.append(b"a", 0) for _ in range(1000)))
            cursor = await ml.cursors.open("sub", "earliest")
            for p in positions[:500]:
                cursor.mark_delete(p)
            cursor.delete(positions[500:])
            assert cursor.mark_delete_position == positions[-1]
            await cursor.flush()
        finally:
            await storage.close()

    run(scenario)
    values = cursor_records(
        kafka_bootstrap, config.cluster_name, formats.cursor_key("acked", "sub")
    )
    # The cursor's creation, then one write for the 1000 acknowledgements.
    assert len(values) == 2
    final = formats.decode_cursor_info(values[-1] or b"")
    assert final.mark_delete.entry_id == 999 and final.individually_deleted == []


def test_latest_state_is_written_by_the_timer(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    config = make_config(managed_ledger_default_mark_delete_rate_limit=4)
    key = formats.cursor_key("timed", "sub")

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("timed")
            positions = await asyncio.gather(*(ml.append(b"a", 0) for _ in range(20)))
            cursor = await ml.cursors.open("sub", "earliest")
            for p in positions:
                cursor.mark_delete(p)
            await wait_until(lambda: cursor.persisted_mark_delete_position == positions[-1], 5)
            values = await asyncio.to_thread(
                cursor_records, kafka_bootstrap, config.cluster_name, key
            )
            assert len(values) == 2
            assert formats.decode_cursor_info(values[-1] or b"").mark_delete == positions[-1]
        finally:
            await storage.close()

    run(scenario)


def test_new_cursor_is_stored_before_open_returns(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        first = await KafkaStorage.start(config)
        second: KafkaStorage | None = None
        try:
            ml = await first.open_managed_ledger("shared")
            positions = [await ml.append(b"x", 0) for _ in range(3)]
            latest = await ml.cursors.open("late", "latest")
            earliest = await ml.cursors.open("early", "earliest")
            assert latest.mark_delete_position == positions[-1] and latest.backlog() == 0
            assert earliest.backlog() == 3
            assert await ml.cursors.open("late") is latest
            second = await KafkaStorage.start(config)
            ml2 = await second.open_managed_ledger("shared")
            assert ml2.cursors.stored_names() == ["early", "late"]
            assert ml2.cursors.exists("late") and not ml2.cursors.exists("nope")
            seen = await ml2.cursors.open("late")
            assert seen.mark_delete_position == positions[-1]
        finally:
            if second is not None:
                await second.close()
            await first.close()

    run(scenario)


def test_reset_is_durable_and_delete_cursor_leaves_a_tombstone(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    config = make_config(managed_ledger_default_mark_delete_rate_limit=0.01)

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("seek")
            positions = [await ml.append(b"s", 0) for _ in range(6)]
            cursor = await ml.cursors.open("sub", "earliest")
            cursor.mark_delete(positions[4])
            await cursor.reset(positions[2])
            assert cursor.persisted_mark_delete_position == positions[1]
            assert [e.position for e in await cursor.read_entries(10)] == positions[2:]
            await ml.cursors.delete("sub")
            assert not ml.cursors.exists("sub") and ml.cursors.opened() == {}
            try:
                await ml.cursors.delete("sub")
            except CursorNotFoundError:
                pass
            else:
                raise AssertionError("deleting a missing cursor must fail")
        finally:
            await storage.close()
        again = await KafkaStorage.start(config)
        try:
            assert not (await again.open_managed_ledger("seek")).cursors.exists("sub")
        finally:
            await again.close()

    run(scenario)
    values = cursor_records(kafka_bootstrap, config.cluster_name, formats.cursor_key("seek", "sub"))
    assert values[-1] is None
    assert formats.decode_cursor_info(values[-2] or b"").mark_delete.entry_id == 1


def test_non_durable_cursors(make_config: ConfigFactory) -> None:
    async def scenario() -> None:
        storage = await KafkaStorage.start(make_config(**SMALL_LEDGERS))
        try:
            ml = await storage.open_managed_ledger("readers")
            positions = [await ml.append(f"r{i}".encode(), 0) for i in range(6)]
            tail = ml.cursors.new_non_durable(None)
            assert not tail.durable and not tail.has_more_entries()
            from_start = ml.cursors.new_non_durable(Position(-1, -1))
            assert [e.data for e in await from_start.read_entries(3)] == [b"r0", b"r1", b"r2"]
            inclusive = ml.cursors.new_non_durable(positions[4], inclusive=True)
            exclusive = ml.cursors.new_non_durable(positions[4])
            assert [e.data for e in await inclusive.read_entries(10)] == [b"r4", b"r5"]
            assert [e.data for e in await exclusive.read_entries(10)] == [b"r5"]
            await ml.append(b"r6", 0)
            assert tail.has_more_entries()
            assert [e.data for e in await tail.read_entries(10)] == [b"r6"]
            assert ml.cursors.opened() == {}
        finally:
            await storage.close()

    run(scenario)
