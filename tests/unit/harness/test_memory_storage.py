"""The in-memory storage keeps the contracts of the real one (the domain's unit tests
stand on it): same signatures, appends settled in call order, fencing, rollover, restarts."""

from __future__ import annotations

import asyncio
import inspect
import types

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import LedgerFencedError, StorageError, TopicNotFoundError
from dedup_broker.storage import api
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.storage.tables.metadata_table import KafkaMetadataTable
from dedup_broker.storage.values import Position
from harness.memory_broker import settle
from harness.memory_ledger import MemoryLedger
from harness.memory_storage import MemoryStorage
from harness.memory_table import MemoryTable


def surface(protocol: type) -> tuple[str, ...]:
    """The methods and properties a storage Protocol (``storage/api.py``) promises."""
    names = set()
    for klass in protocol.__mro__:
        if klass is object or klass.__name__ in ("Protocol", "Generic"):
            continue
        for name, member in vars(klass).items():
            if (callable(member) or isinstance(member, property)) and (
                not name.startswith("_") or name == "__len__"
            ):
                names.add(name)
    return tuple(sorted(names))


def shape(member: object) -> object:
    """What callers rely on: property or not, coroutine or not, the parameters."""
    if member is None or isinstance(member, (property, types.MemberDescriptorType)):
        return "an attribute"  # a property, or set on each instance
    assert callable(member)
    parameters = [
        (p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()
    ]
    return inspect.iscoroutinefunction(member), parameters


@pytest.mark.parametrize(
    ("model", "real", "names"),
    [
        (MemoryLedger, ManagedLedgerImpl, surface(api.ManagedLedger)),
        (MemoryStorage, KafkaStorage, surface(api.StorageService)),
        (MemoryTable, KafkaMetadataTable, surface(api.MetadataTable)),
    ],
)
def test_the_model_has_the_real_signatures(model: type, real: type, names: tuple[str]) -> None:
    for name in names:
        assert shape(inspect.getattr_static(model, name, None)) == shape(
            inspect.getattr_static(real, name, None)
        ), name


def config(**settings: object) -> BrokerConfig:
    return BrokerConfig().with_overrides(**settings)


async def test_appends_resolve_on_the_loop_in_call_order_and_wake_listeners() -> None:
    ledger = MemoryStorage().ledger("t/ns/persistent/a")
    woken: list[Position] = []
    ledger.add_entries_listener(lambda: woken.append(ledger.last_confirmed))
    futures = [ledger.append(b"x%d" % i, 0) for i in range(3)]
    assert not any(f.done() for f in futures)
    assert [await f for f in futures] == [Position(1, 0), Position(1, 1), Position(1, 2)]
    await settle()
    assert woken == [Position(1, 2)]
    assert [e.data for e in await ledger.read_entries(Position(1, 0), 10)] == [b"x0", b"x1", b"x2"]


async def test_held_appends_acknowledged_out_of_order_settle_in_call_order() -> None:
    ledger = MemoryStorage().ledger("t/ns/persistent/a")
    ledger.hold_appends = True
    first, second = ledger.append(b"a", 0), ledger.append(b"b", 0)
    pending = ledger.pending_appends
    pending[1].acknowledge()
    await settle()
    assert not second.done()
    assert ledger.last_confirmed == Position(1, -1)
    pending[0].acknowledge()
    assert (first.result(), second.result()) == (Position(1, 0), Position(1, 1))


async def test_a_failed_append_fences_then_a_new_ledger_holds_what_landed() -> None:
    ledger = MemoryStorage().ledger("t/ns/persistent/a")
    resolved: list[tuple[Position, Position]] = []
    ledger.on_write_failure_resolved = lambda told, truth: resolved.append((told, truth))
    ledger.hold_appends = True
    futures = [ledger.append(b"%d" % i, 0) for i in range(4)]
    pending = ledger.pending_appends
    pending[0].acknowledge()
    pending[1].fail(landed=True)  # a failed report, but Kafka stored it
    pending[2].acknowledge()  # too late: the ledger is fenced
    assert futures[0].result() == Position(1, 0)
    assert str(futures[1].exception()) == (
        "append to t/ns/persistent/a: Kafka did not acknowledge the write"
    )
    assert isinstance(futures[2].exception(), LedgerFencedError)
    assert isinstance(futures[3].exception(), LedgerFencedError)
    assert ledger.state == "Fenced"
    refused = ledger.append(b"late", 0)
    assert isinstance(refused.exception(), LedgerFencedError)
    await ledger.wait_writable()
    assert ledger.state == "Open"
    assert resolved == [(Position(1, 0), Position(1, 1))]
    assert [e.data for e in await ledger.read_entries(Position(1, 0), 10)] == [b"0", b"1"]
    ledger.hold_appends = False
    assert await ledger.append(b"next", 0) == Position(2, 0)


async def test_rollover_follows_the_configured_rules() -> None:
    storage = MemoryStorage(
        config(
            managed_ledger_max_entries_per_ledger=2,
            managed_ledger_min_ledger_rollover_time_minutes=0,
        )
    )
    ledger = storage.ledger("t/ns/persistent/a")
    positions = [await ledger.append(b"%d" % i, 0) for i in range(5)]
    assert positions == [
        Position(1, 0),
        Position(1, 1),
        Position(2, 0),
        Position(2, 1),
        Position(3, 0),
    ]
    assert ledger.next_position(Position(1, 1)) == Position(2, 0)
    assert [e.position for e in await ledger.read_entries(Position(1, 1), 3)] == positions[1:4]
    assert ledger.number_of_entries() == 5


async def test_a_restart_sees_what_was_stored_only() -> None:
    storage = MemoryStorage()
    ledger = storage.ledger("t/ns/persistent/a")
    for i in range(3):
        ledger.add_entry(b"%d" % i)
    cursor = await ledger.cursors.open("sub", "earliest")
    cursor.mark_delete(Position(1, 0))
    await cursor.flush()
    cursor.mark_delete(Position(1, 1))  # only in memory: the write is rate-limited
    ledger.hold_appends = True
    ledger.append(b"never acknowledged", 0)

    reopened = storage.restarted().ledger("t/ns/persistent/a")
    assert reopened.ledgers()[0].entries == 3
    assert reopened.last_confirmed == Position(1, 2)
    assert reopened.cursors.stored_names() == ["sub"]
    again = await reopened.cursors.open("sub")
    assert again.mark_delete_position == Position(1, 0)
    assert await reopened.append(b"3", 0) == Position(2, 0)


async def test_opening_and_deleting_managed_ledgers() -> None:
    storage = MemoryStorage()
    with pytest.raises(TopicNotFoundError):
        await storage.open_managed_ledger("t/ns/persistent/a", create=False)
    ledger = await storage.open_managed_ledger("t/ns/persistent/a")
    assert await storage.open_managed_ledger("t/ns/persistent/a") is ledger
    await ledger.cursors.open("sub")
    assert storage.list_managed_ledgers() == ["t/ns/persistent/a"]
    await storage.delete_managed_ledger("t/ns/persistent/a")
    assert not storage.managed_ledger_exists("t/ns/persistent/a")
    assert storage.cursor_infos.items() == []
    assert ledger.state == "Closed"
    storage.open_failure = StorageError("Kafka is unreachable")
    with pytest.raises(StorageError, match=r"^Kafka is unreachable$"):
        await storage.open_managed_ledger("t/ns/persistent/b")


async def test_a_table_write_may_be_held_or_failed() -> None:
    table = MemoryTable()
    table.gate = asyncio.Event()
    writing = asyncio.create_task(table.put("k", b"v"))
    await settle()
    assert (table.get("k"), table.writes_in_progress) == (None, 1)
    table.gate.set()
    await writing
    table.failure = StorageError("no")
    with pytest.raises(StorageError):
        await table.delete("k")
    assert table.items() == [("k", b"v")]
    assert table.writes == [("k", b"v")]


async def test_a_cursor_whose_creation_failed_never_overwrites_a_later_one() -> None:
    storage = MemoryStorage(config(managed_ledger_default_mark_delete_rate_limit=100))
    ledger = storage.ledger("t/ns/persistent/a")
    ledger.add_entry(b"0")
    ledger.add_entry(b"1")
    storage.cursor_infos.failure = StorageError("cursor topic unavailable")
    with pytest.raises(StorageError):
        await ledger.cursors.open("sub", "earliest")
    storage.cursor_infos.failure = None
    cursor = await ledger.cursors.open("sub", "earliest")
    cursor.mark_delete(Position(1, 1))
    await cursor.flush()
    await asyncio.sleep(0.05)  # five write intervals of 10 ms
    assert ledger.stored_cursor("sub").mark_delete == Position(1, 1)
