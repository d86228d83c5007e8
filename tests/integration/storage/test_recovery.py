"""Failed writes and unclean stops: what Kafka holds decides, nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from dedup_broker.errors import (
    LedgerFencedError,
    ManagedLedgerFencedError,
    StorageError,
)
from dedup_broker.storage import formats
from dedup_broker.storage.api import ManagedLedger, Position
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from tests.integration.storage.helpers import ConfigFactory, land_records, run, wait_until
from tests.integration.system_topics import deletion_helpers


def _set_sealed(admin: AdminClient, topic: str) -> None:
    entry = ConfigEntry("max.message.bytes", "0", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def _refuses_writes(producer: Producer, topic: str) -> bool:
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"probe", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert outcome, f"no delivery report for a probe of {topic}"
    error = outcome[0]
    if error is None:
        return False
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
    return True


def seal(admin: AdminClient, bootstrap: str, topic: str, probe: str) -> None:
    """Make Kafka refuse further writes to ``topic`` (as a recovering broker does), and
    return only once its broker applies the refusal.

    The controller commits a config change before the broker applies it, and the broker's
    answer to a describe can show the new value a moment before its log uses it. A probe
    topic sealed once the broker shows ``topic``'s seal comes in a later metadata update,
    so once a write to it is refused the broker has applied the earlier seal too; probing
    ``topic`` itself would add a record to the ledger when the seal is not applied yet.
    """
    for future in admin.create_topics([NewTopic(probe, 1, 1)]).values():
        future.result()
    _set_sealed(admin, topic)
    described = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deletion_helpers.wait_until(
        lambda: (
            admin.describe_configs([described])[described].result()["max.message.bytes"].value
            == "0"
        ),
        what=f"Kafka to show max.message.bytes=0 on {topic}",
    )
    _set_sealed(admin, probe)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    deletion_helpers.wait_until(
        lambda: _refuses_writes(producer, probe), what=f"Kafka to refuse writes to {probe}"
    )


def test_reopen_after_an_unclean_stop(make_config: ConfigFactory) -> None:
    config = make_config()

    async def scenario() -> None:
        crashed = await KafkaStorage.start(config)
        ml = await crashed.open_managed_ledger("crashy")
        acked = [await ml.append(f"c{i}".encode(), 0) for i in range(10)]
        cursor = await ml.cursors.open("sub", "earliest")
        cursor.mark_delete(acked[3])
        await cursor.flush()
        old_ledger = acked[0].ledger_id
        # The first broker never closes: a second one takes over from what is stored.
        successor = await KafkaStorage.start(config)
        try:
            ml2 = await successor.open_managed_ledger("crashy")
            infos = ml2.ledgers()
            assert [(i.ledger_id, i.entries) for i in infos[:-1]] == [(old_ledger, 10)]
            assert infos[0].size == sum(len(f"c{i}".encode()) for i in range(10))
            assert infos[-1].entries == -1 and infos[-1].ledger_id > old_ledger
            assert ml2.last_confirmed == acked[-1]
            entries = await ml2.read_entries(ml2.first_position(), 20)
            assert [e.data for e in entries] == [f"c{i}".encode() for i in range(10)]
            resumed = await ml2.cursors.open("sub")
            assert resumed.mark_delete_position == acked[3]
            nxt = await ml2.append(b"after", 0)
            assert nxt == Position(infos[-1].ledger_id, 0)

            # The old instance's ledger is sealed: its writes fail, and it notices the
            # takeover instead of overwriting the successor's metadata.
            failed = ml.append(b"zombie", 0)
            try:
                await failed
            except StorageError:
                pass
            else:
                raise AssertionError("a write to a sealed ledger must fail")
            await wait_until(lambda: ml.state == "Closed", timeout=30)
            late = ml.append(b"late", 0)
            try:
                await late
            except ManagedLedgerFencedError:
                pass
            else:
                raise AssertionError("the taken-over ledger must refuse appends")
            await successor.refresh()
            stored = successor._managed_ledger_infos.get("crashy")
            assert stored is not None
            stored_ledgers = formats.decode_managed_ledger_info(stored).ledgers
            assert [(i.ledger_id, i.entries) for i in stored_ledgers] == [
                (i.ledger_id, i.entries) for i in ml2.ledgers()
            ]
        finally:
            await successor.close()
            await crashed.close()

    run(scenario)


async def _misplaced_write_recovers(ml: ManagedLedger) -> None:
    """The broker's next write lands out of its place: it fails, and the managed ledger
    recovers."""
    try:
        await ml.append(b"mine", 0)
    except StorageError:
        pass
    else:
        raise AssertionError("a misplaced write must fail")
    await asyncio.wait_for(ml.wait_writable(), 30)


def test_records_that_landed_despite_a_failure_become_entries(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("landed")
            resolved: list[tuple[Position, Position]] = []
            ml.on_write_failure_resolved = lambda told, true: resolved.append((told, true))
            told = [await ml.append(f"ok{i}".encode(), 0) for i in range(3)]
            ledger = told[0].ledger_id
            # Entries 3 and 4 land in their places, their reports lost: the broker's
            # next append (entry 3 for it) then lands at offset 6.
            land_records(kafka_bootstrap, storage.ledger_store.topic(ledger), [
                (b"landed-3", 16, 3), (b"landed-4", 24, 4)
            ])  # fmt: skip
            failed = ml.append(b"mine", 0)
            try:
                await failed
            except StorageError as exc:
                assert "offset 6" in str(exc)
            else:
                raise AssertionError("a misplaced write must fail")
            assert ml.state == "Fenced"
            refused = ml.append(b"while-fenced", 0)
            try:
                await refused
            except LedgerFencedError:
                pass
            else:
                raise AssertionError("appends must fail while fenced")
            await asyncio.wait_for(ml.wait_writable(), 30)
            assert ml.state == "Open"
            truth = Position(ledger, 4)
            assert resolved == [(told[-1], truth)]
            assert ml.last_confirmed == truth
            assert [(i.ledger_id, i.entries) for i in ml.ledgers()[:-1]] == [(ledger, 5)]
            entries = await ml.read_entries(told[0], 10)
            # "mine" lies past the end: its append failed, its client sends it again.
            assert [e.data for e in entries] == [b"ok0", b"ok1", b"ok2", b"landed-3", b"landed-4"]
            after = await ml.append(b"next", 0)
            assert after == Position(ml.ledgers()[-1].ledger_id, 0)
        finally:
            await storage.close()

    run(scenario)


def test_records_after_a_gap_are_not_part_of_the_ledger(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    """A write that timed out in the producer's queue leaves a gap and the records sent
    after it land one place early (librdkafka allows that): the ledger ends before the
    gap, so nothing lands where a reader would take it for the missing entry (whose
    resend PIP-6 would otherwise answer as a duplicate of what landed after it)."""
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("gap")
            told = [await ml.append(f"ok{i}".encode(), 0) for i in range(2)]
            ledger = told[0].ledger_id
            # Entry 2 never landed; entries 3 and 4 did, at offsets 3 and 4.
            land_records(kafka_bootstrap, storage.ledger_store.topic(ledger), [
                (b"entry-3", 20, 3), (b"entry-4", 27, 4)
            ])  # fmt: skip
            await _misplaced_write_recovers(ml)
            assert ml.last_confirmed == told[-1]
            assert [(i.ledger_id, i.entries) for i in ml.ledgers()[:-1]] == [(ledger, 2)]
            entries = await ml.read_entries(told[0], 10)
            assert [e.data for e in entries] == [b"ok0", b"ok1"]
            # A broker taking over an open ledger with a gap ends it in the same place.
            closed = await storage.ledger_store.close_at_true_end(ledger)
            assert (closed.entries, closed.size) == (2, len(b"ok0ok1"))
        finally:
            await storage.close()

    run(scenario)


def test_a_gap_and_as_many_duplicates_after_it_do_not_hide_the_gap(
    make_config: ConfigFactory, kafka_bootstrap: str
) -> None:
    """A timed-out write leaves a gap and the producer's retry after it writes records
    twice: two entries missing, then entries 4 and 5 twice, so the last record (entry 5
    at offset 6) sits in its place although entries 2 and 3 are not in Kafka. Taking the
    ledger whole would make the resend of entry 2 look like a duplicate of what follows
    it (acknowledged, never stored); it ends before the gap on every path."""
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("gap-and-duplicates")
            told = [await ml.append(f"ok{i}".encode(), 0) for i in range(2)]
            ledger = told[0].ledger_id
            topic = storage.ledger_store.topic(ledger)
            land_records(kafka_bootstrap, topic, [
                (b"entry-4", 22, 4), (b"entry-5", 29, 5), (b"entry-4", 22, 4), (b"entry-5", 29, 5)
            ])  # fmt: skip
            # A broker taking over the open ledger (its writer gone) ends it before the gap.
            closed = await storage.ledger_store.close_at_true_end(ledger)
            assert (closed.entries, closed.size) == (2, len(b"ok0ok1"))
        finally:
            await storage.close()
        # So does the writer itself, recovering from its own failed write.
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("writer-sees-the-gap")
            told = [await ml.append(f"ok{i}".encode(), 0) for i in range(3)]
            ledger = told[0].ledger_id
            land_records(kafka_bootstrap, storage.ledger_store.topic(ledger), [
                (b"entry-5", 20, 5), (b"entry-6", 27, 6), (b"entry-5", 20, 5), (b"entry-6", 27, 6)
            ])  # fmt: skip
            # Entries 3 and 4 are missing: the broker's next write (entry 3) lands at
            # offset 8 and fails as misplaced.
            await _misplaced_write_recovers(ml)
            assert ml.last_confirmed == told[-1]
            assert [(i.ledger_id, i.entries) for i in ml.ledgers()[:-1]] == [(ledger, 3)]
            entries = await ml.read_entries(told[0], 10)
            assert [e.data for e in entries] == [b"ok0", b"ok1", b"ok2"]
        finally:
            await storage.close()

    run(scenario)


def test_a_failed_write_fails_everything_in_flight_in_order(
    make_config: ConfigFactory, admin: AdminClient
) -> None:
    config = make_config()

    async def scenario() -> None:
        storage = await KafkaStorage.start(config)
        try:
            ml = await storage.open_managed_ledger("refused")
            resolved: list[tuple[Position, Position]] = []
            ml.on_write_failure_resolved = lambda told, true: resolved.append((told, true))
            kept = [await ml.append(b"kept", 0) for _ in range(2)]
            ledger_topic = storage.ledger_store.topic(kept[0].ledger_id)
            probe = f"{config.cluster_name}.seal-probe"
            await asyncio.to_thread(
                seal, admin, config.kafka_bootstrap_servers, ledger_topic, probe
            )
            futures = [ml.append(f"lost{i}".encode(), 0) for i in range(20)]
            order: list[tuple[int, str]] = []

            def record(index: int) -> Callable[[asyncio.Future[Position]], None]:
                return lambda f: order.append((index, type(f.exception()).__name__))

            for i, future in enumerate(futures):
                future.add_done_callback(record(i))
            await asyncio.gather(*futures, return_exceptions=True)
            assert [i for i, _ in order] == list(range(20))
            assert order[0] == (0, "StorageError")
            assert {kind for _, kind in order[1:]} == {"LedgerFencedError"}
            await asyncio.wait_for(ml.wait_writable(), 30)
            assert resolved == [(kept[-1], kept[-1])]
            assert [(i.ledger_id, i.entries) for i in ml.ledgers()[:-1]] == [(kept[0].ledger_id, 2)]
            fresh = await ml.append(b"fresh", 0)
            assert fresh == Position(ml.ledgers()[-1].ledger_id, 0)
            assert [e.data for e in await ml.read_entries(kept[0], 10)] == [
                b"kept",
                b"kept",
                b"fresh",
            ]
        finally:
            await storage.close()

    run(scenario)
