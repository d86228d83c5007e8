"""Cursor acknowledgement arithmetic, reads and batched persistence (own fakes, no Kafka)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dedup_broker.errors import StorageError
from dedup_broker.storage import formats
from dedup_broker.storage.cursor.cursor import ManagedCursorImpl
from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.values import DEFAULT_MAX_BYTES, Entry, LedgerInfo, Position

P = Position


class FakeLedger:
    """Ledgers 1 (3 entries) and 2 (open, 4 entries); entry data ``b"L:E"``."""

    def __init__(self) -> None:
        self.ledgers = LedgerList([LedgerInfo(1, 3, 9, 100), LedgerInfo(2, -1, 0, 0)])
        for _ in range(4):
            self.ledgers.add_confirmed(3)
        self.reads: list[Position] = []
        self.before_read: Callable[[], None] | None = None
        self.read_limit: Position | None = None

    @property
    def last_confirmed(self) -> Position:
        return self.ledgers.last_confirmed()

    def next_position(self, p: Position) -> Position:
        return self.ledgers.next_position(p)

    def previous_position(self, p: Position) -> Position:
        return self.ledgers.previous_position(p)

    def is_valid_position(self, p: Position) -> bool:
        return self.ledgers.exists(p)

    def entries_between(self, start: Position, end: Position) -> int:
        return self.ledgers.entries_between(start, end)

    def normalize_position(self, p: Position) -> Position:
        return self.ledgers.normalize(p)

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]:
        if self.before_read is not None:
            self.before_read()
        await asyncio.sleep(0)
        result: list[Entry] = []
        p = self.ledgers.normalize(start)
        while len(result) < max_entries and p <= self.last_confirmed:
            self.reads.append(p)
            result.append(Entry(p, f"{p.ledger_id}:{p.entry_id}".encode(), 1000))
            p = self.ledgers.next_position(p)
        return result


class FakeStorage:
    def __init__(self) -> None:
        self.writes: list[formats.CursorRecord] = []
        self.fail = False

    async def write_cursor(self, name: str, data: bytes) -> None:
        await asyncio.sleep(0.001)
        if self.fail:
            raise StorageError("Kafka unavailable")
        self.writes.append(formats.decode_cursor_info(data))


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def durable(ledger: FakeLedger, storage: FakeStorage, rate: float = 1.0) -> ManagedCursorImpl:
    return ManagedCursorImpl(
        ledger,
        "sub",
        P(1, -1),
        storage=storage,
        rate_limit=rate,
        persisted=True,
        last_persisted_ms=1,
    )


def test_mark_delete_rules() -> None:
    async def scenario() -> None:
        ledger = FakeLedger()
        cursor = ManagedCursorImpl(ledger, "r", P(1, -1))
        assert cursor.read_position == P(1, 0)
        assert cursor.backlog() == 7
        cursor.mark_delete(P(1, 1), {"seq": 7})
        assert cursor.mark_delete_position == P(1, 1)
        assert cursor.properties == {"seq": 7}
        assert cursor.read_position == P(1, 2)
        cursor.mark_delete(P(1, 0), {"seq": 1})
        assert cursor.mark_delete_position == P(1, 1) and cursor.properties == {"seq": 7}
        cursor.mark_delete(P(2, 9))
        assert cursor.mark_delete_position == P(1, 1)
        cursor.mark_delete(P(1, 2))
        assert cursor.properties == {}
        assert cursor.read_position == P(2, 0)
        assert cursor.backlog() == 4

    run(scenario)


def test_individual_acks_advance_mark_delete_across_ledgers() -> None:
    async def scenario() -> None:
        ledger = FakeLedger()
        cursor = ManagedCursorImpl(ledger, "r", P(1, -1))
        cursor.delete([P(1, 2), P(2, 0), P(2, 2), P(1, 7), P(2, 8)])
        assert cursor.individually_deleted_ranges() == [
            (P(1, 2), P(1, 2)),
            (P(2, 0), P(2, 0)),
            (P(2, 2), P(2, 2)),
        ]
        assert cursor.backlog() == 4
        assert cursor.is_acknowledged(P(2, 0)) and not cursor.is_acknowledged(P(2, 1))
        cursor.mark_delete(P(1, 0), {"x": 1})
        cursor.delete([P(1, 1)])
        # 1:1 joins 1:0 .. 1:2, and 2:0 follows 1:2 across the ledger boundary.
        assert cursor.mark_delete_position == P(2, 0)
        assert cursor.properties == {}
        assert cursor.individually_deleted_ranges() == [(P(2, 2), P(2, 2))]
        assert cursor.backlog() == 2
        cursor.mark_delete(P(2, 3))
        assert cursor.individually_deleted_ranges() == []
        assert cursor.backlog() == 0
        assert not cursor.has_more_entries()

    run(scenario)


def test_read_entries_skips_acknowledged_and_advances() -> None:
    async def scenario() -> None:
        ledger = FakeLedger()
        cursor = ManagedCursorImpl(ledger, "r", P(1, -1))
        cursor.delete([P(1, 1), P(1, 2), P(2, 1)])
        first = await cursor.read_entries(2)
        assert [str(e.position) for e in first] == ["1:0", "2:0"]
        assert P(1, 1) not in ledger.reads
        assert cursor.read_position == P(2, 1)
        rest = await cursor.read_entries(10)
        assert [e.data for e in rest] == [b"2:2", b"2:3"]
        assert cursor.read_position == P(2, 4)
        assert await cursor.read_entries(10) == []
        assert not cursor.has_more_entries()
        cursor.rewind()
        assert cursor.read_position == P(1, 0)
        assert cursor.has_more_entries()

    run(scenario)


def test_read_entries_respects_max_bytes_but_returns_one() -> None:
    async def scenario() -> None:
        cursor = ManagedCursorImpl(FakeLedger(), "r", P(1, -1))
        assert [str(e.position) for e in await cursor.read_entries(10, max_bytes=7)] == [
            "1:0",
            "1:1",
        ]
        assert [str(e.position) for e in await cursor.read_entries(10, max_bytes=1)] == ["1:2"]

    run(scenario)


def test_seek_during_read_wins() -> None:
    async def scenario() -> None:
        ledger = FakeLedger()
        cursor = ManagedCursorImpl(ledger, "r", P(1, -1))
        ledger.before_read = lambda: cursor.seek(P(2, 2))
        entries = await cursor.read_entries(2)
        assert [str(e.position) for e in entries] == ["1:0", "1:1"]
        assert cursor.read_position == P(2, 2)

    run(scenario)


def test_non_durable_cursor_never_writes() -> None:
    async def scenario() -> None:
        cursor = ManagedCursorImpl(FakeLedger(), "r", P(1, -1))
        assert not cursor.durable
        cursor.mark_delete(P(1, 2))
        await cursor.flush()

    run(scenario)


def test_acks_are_batched_by_the_rate_limit() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = durable(ledger, storage, rate=10.0)  # one write per 100 ms
        positions = [P(1, 0), P(1, 1), P(1, 2), P(2, 0), P(2, 1)]
        for _ in range(100):
            for p in positions:
                cursor.delete([p])
        cursor.mark_delete(P(2, 2), {"seq": 99})
        assert storage.writes == []
        await asyncio.sleep(0.3)
        assert len(storage.writes) == 1
        assert storage.writes[0].mark_delete == P(2, 2)
        assert storage.writes[0].properties == {"seq": 99}
        assert cursor.persisted_mark_delete_position == P(2, 2)
        await cursor.flush()
        assert len(storage.writes) == 1

    run(scenario)


def test_flush_writes_now_and_persists_ranges() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = durable(ledger, storage, rate=0.001)
        cursor.delete([P(1, 2), P(2, 1), P(2, 2)])
        await cursor.flush()
        assert len(storage.writes) == 1
        assert storage.writes[0].mark_delete == P(1, -1)
        assert storage.writes[0].individually_deleted == [(P(1, 2), P(1, 2)), (P(2, 1), P(2, 2))]

    run(scenario)


def test_reset_is_stored_before_returning() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = durable(ledger, storage, rate=0.001)
        cursor.mark_delete(P(2, 2), {"a": 1})
        cursor.delete([P(2, 3)])
        await cursor.reset(P(2, 0))
        assert cursor.mark_delete_position == P(1, 2)
        assert cursor.read_position == P(2, 0)
        assert cursor.individually_deleted_ranges() == []
        assert storage.writes[-1] == formats.CursorRecord(
            P(1, 2), [], {}, storage.writes[-1].last_active_ms
        )

    run(scenario)


def test_failed_write_is_retried_and_flush_raises() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = durable(ledger, storage, rate=20.0)
        storage.fail = True
        cursor.mark_delete(P(1, 1))
        try:
            await cursor.flush()
        except StorageError:
            pass
        else:
            raise AssertionError("flush should fail while storage fails")
        storage.fail = False
        await asyncio.sleep(0.2)
        assert [w.mark_delete for w in storage.writes] == [P(1, 1)]

    run(scenario)


def test_limit_of_stored_ranges() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = ManagedCursorImpl(
            ledger, "s", P(1, -1), storage=storage, persisted=True, max_ranges_to_persist=1
        )
        cursor.delete([P(1, 1), P(2, 1)])
        await cursor.flush()
        assert storage.writes[0].individually_deleted == [(P(1, 1), P(1, 1))]
        assert len(cursor.individually_deleted_ranges()) == 2

    run(scenario)


def test_batches_acknowledged_in_part_combine_until_the_entry_is_acknowledged() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = durable(ledger, storage, rate=1000.0)
        other = durable(ledger, FakeStorage(), rate=1000.0)
        assert not cursor.delete_batch_indexes(P(1, 1), [0b1110])
        assert not cursor.delete_batch_indexes(P(1, 1), [0b1011])
        assert cursor.batch_ack_set(P(1, 1)) == (0b1010,)
        assert other.batch_acks() == {} and other.batch_ack_set(P(1, 1)) == ()
        assert not cursor.is_acknowledged(P(1, 1))
        await cursor.flush()
        assert storage.writes[-1].batch_acks == {P(1, 1): (0b1010,)}
        # The last open messages acknowledged: the whole entry is, and its set is gone.
        assert cursor.delete_batch_indexes(P(1, 1), [0b0101])
        assert cursor.individually_deleted_ranges() == [(P(1, 1), P(1, 1))]
        assert cursor.batch_acks() == {}
        await cursor.flush()
        assert storage.writes[-1].batch_acks == {}
        # Already acknowledged, or not an entry: nothing to keep.
        assert cursor.delete_batch_indexes(P(1, 1), [0b1])
        assert not cursor.delete_batch_indexes(P(9, 0), [0b1])
        assert cursor.batch_acks() == {}

    run(scenario)


def test_batch_ack_sets_are_dropped_when_acknowledged_or_passed() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = durable(ledger, storage, rate=1000.0)
        for p in (P(1, 0), P(1, 2), P(2, 1), P(2, 3)):
            cursor.delete_batch_indexes(p, [0b10])
        cursor.delete([P(2, 1)])  # the whole entry
        assert sorted(cursor.batch_acks()) == [P(1, 0), P(1, 2), P(2, 3)]
        cursor.mark_delete(P(1, 2))  # passes two of them
        assert cursor.batch_acks() == {P(2, 3): (0b10,)}
        cursor.delete([P(2, 0), P(2, 2)])  # mark-delete moves over 2:0..2:2
        assert cursor.mark_delete_position == P(2, 2)
        assert cursor.batch_acks() == {P(2, 3): (0b10,)}
        await cursor.reset(P(2, 0))
        assert cursor.batch_acks() == {}
        assert storage.writes[-1].batch_acks == {}

    run(scenario)


def test_stored_batch_ack_sets_are_loaded_and_limited() -> None:
    async def scenario() -> None:
        ledger, storage = FakeLedger(), FakeStorage()
        cursor = ManagedCursorImpl(
            ledger,
            "s",
            P(1, 0),
            storage=storage,
            individually_deleted=[(P(2, 0), P(2, 0))],
            batch_acks={P(1, 0): (1,), P(2, 0): (1,), P(1, 2): (0,), P(2, 2): (6,), P(1, 1): (2,)},
            persisted=True,
            max_batch_acks_to_persist=1,
        )
        # Sets of acknowledged entries (and empty ones) are not state.
        assert cursor.batch_acks() == {P(1, 1): (2,), P(2, 2): (6,)}
        cursor.delete([P(2, 3)])
        await cursor.flush()
        assert storage.writes[-1].batch_acks == {P(1, 1): (2,)}  # the first ones only
        assert len(cursor.batch_acks()) == 2

    run(scenario)


def test_a_mark_delete_never_moves_past_entries_it_does_not_name() -> None:
    """``(L, -1)`` means "before ledger L"; ids a ledger does not have are ignored (a
    uint64 ``-1`` read raw once moved the cursor past the rest of ledger 1)."""

    async def scenario() -> None:
        ledger = FakeLedger()
        cursor = ManagedCursorImpl(ledger, "r", P(1, -1))
        cursor.mark_delete(P(1, 2**64 - 1))
        cursor.mark_delete(P(1, 3))
        assert cursor.mark_delete_position == P(1, -1)
        assert cursor.read_position == P(1, 0) and cursor.backlog() == 7
        cursor.mark_delete(P(1, -1))
        assert cursor.mark_delete_position == P(1, -1)
        cursor.mark_delete(P(2, -1))
        assert cursor.mark_delete_position == P(1, 2)
        assert cursor.read_position == P(2, 0) and cursor.backlog() == 4
        assert [e.position for e in await cursor.read_entries(10)] == [
            P(2, 0),
            P(2, 1),
            P(2, 2),
            P(2, 3),
        ]

    run(scenario)
