"""A topic's transaction buffer on an in-memory managed ledger: what a cursor reads while
transactions are open, committed and aborted; what is hidden; snapshots and recovery."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage.api import ManagedLedger, Position
from dedup_broker.transactions.buffer import (
    SNAPSHOT_PROPERTY,
    TransactionBuffer,
    TransactionEndedError,
    TransactionsDisabledError,
)
from dedup_broker.transactions.coordinator_state import TxnAction, TxnId
from harness.memory_storage import MemoryStorage

TOPIC = "public/default/persistent/orders"
T1, T2 = TxnId(0, 1), TxnId(0, 2)
ON = BrokerConfig(transaction_coordinator_enabled=True)


def message(text: str, txn: TxnId | None = None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if txn is not None:
        metadata.txnid_most_bits, metadata.txnid_least_bits = txn.most, txn.least
    return encode_message(metadata, text.encode())


class Woken:
    def __init__(self) -> None:
        self.times = 0

    def __call__(self) -> None:
        self.times += 1


async def started(
    ledger: ManagedLedger, config: BrokerConfig = ON
) -> tuple[TransactionBuffer, Woken]:
    woken = Woken()
    buffer = TransactionBuffer(ledger, config, woken)
    await buffer.recover()
    return buffer, woken


async def write(buffer: TransactionBuffer, text: str, txn: TxnId | None = None) -> Position:
    if txn is not None:
        while not buffer.admit(txn):
            await asyncio.sleep(0.001)  # the first one stores the snapshot
    return await buffer.append(txn, message(text, txn), 1)


async def visible(ledger: ManagedLedger, buffer: TransactionBuffer) -> list[str]:
    """What a reader from the start receives: what its cursor reads, less what is hidden."""
    cursor = ledger.cursors.new_non_durable(Position(-1, -1))
    entries = await cursor.read_entries(100)
    return [e.data[-2:].decode() for e in entries if not buffer.hidden(e.data)]


async def test_readers_stop_before_an_open_transaction_until_it_commits() -> None:
    ledger = await MemoryStorage().open_managed_ledger(TOPIC)
    buffer, woken = await started(ledger)
    await write(buffer, "p1")
    await write(buffer, "t1", T1)
    await write(buffer, "p2")  # after the open transaction's first entry: held too
    await write(buffer, "t2", T2)
    await write(buffer, "t3", T1)
    assert await visible(ledger, buffer) == ["p1"]
    await buffer.end(T1, TxnAction.COMMIT, 2)
    assert woken.times >= 1
    assert await visible(ledger, buffer) == ["p1", "t1", "p2"]  # T2 still open
    await buffer.end(T2, TxnAction.ABORT, 3)
    assert await visible(ledger, buffer) == ["p1", "t1", "p2", "t3"]
    assert buffer.max_read_position() is None
    assert buffer.aborted_transactions() == [T2]


async def test_ended_transactions_take_no_more_writes_and_endings_repeat_harmlessly() -> None:
    ledger = await MemoryStorage().open_managed_ledger(TOPIC)
    buffer, _ = await started(ledger)
    await write(buffer, "t1", T1)
    await buffer.end(T1, TxnAction.ABORT, 2)
    entries = ledger.number_of_entries()
    await buffer.end(T1, TxnAction.ABORT, 2)  # a retried END_TXN_ON_PARTITION
    assert ledger.number_of_entries() == entries
    with pytest.raises(TransactionEndedError):
        buffer.admit(T1)


async def test_transactional_writes_are_refused_while_transactions_are_off() -> None:
    ledger = await MemoryStorage().open_managed_ledger(TOPIC)
    buffer, _ = await started(ledger, BrokerConfig())
    with pytest.raises(TransactionsDisabledError):
        buffer.admit(T1)


async def test_a_topic_never_written_in_a_transaction_has_no_snapshot_and_hides_nothing() -> None:
    ledger = await MemoryStorage().open_managed_ledger(TOPIC)
    buffer, _ = await started(ledger)
    await write(buffer, "p1")
    assert SNAPSHOT_PROPERTY not in ledger.properties
    assert not buffer.used
    assert await visible(ledger, buffer) == ["p1"]


@pytest.mark.parametrize("snapshot_every", [1, 1000])
async def test_a_restart_finds_open_and_aborted_transactions(snapshot_every: int) -> None:
    """After a crash (nothing closed): the snapshot, then the entries after it, give the
    same open and aborted transactions, whether the snapshot is recent or old."""
    storage = MemoryStorage()
    config = ON.with_overrides(transaction_buffer_snapshot_max_transaction_count=snapshot_every)
    ledger = await storage.open_managed_ledger(TOPIC)
    buffer, _ = await started(ledger, config)
    await write(buffer, "p1")
    await write(buffer, "a1", T1)
    await write(buffer, "c1", T2)
    await buffer.end(T1, TxnAction.ABORT, 2)
    await buffer.end(T2, TxnAction.COMMIT, 3)
    t3 = TxnId(0, 3)
    await write(buffer, "o1", t3)
    await write(buffer, "p2")
    before = await visible(ledger, buffer)
    assert before == ["p1", "c1"]

    restarted = await storage.restarted().open_managed_ledger(TOPIC)
    again, _ = await started(restarted, config)
    assert again.aborted_transactions() == [T1]
    assert list(again.open_transactions()) == [t3]
    assert await visible(restarted, again) == before
    await again.end(t3, TxnAction.COMMIT, 4)
    assert await visible(restarted, again) == ["p1", "c1", "o1", "p2"]
    with pytest.raises(TransactionEndedError):
        again.admit(T1)


async def test_a_send_naming_its_transaction_only_in_the_command_is_hidden_once_aborted() -> None:
    """The Go client writes the transaction into the SEND, not the message metadata: the
    buffer stores it in the metadata, so the aborted entries stay hidden, after a restart
    too; entries that name their transaction are stored as sent."""
    storage = MemoryStorage()
    ledger = await storage.open_managed_ledger(TOPIC)
    buffer, _ = await started(ledger)
    for text, txn in (("g1", T1), ("j1", T2)):
        while not buffer.admit(txn):
            await asyncio.sleep(0.001)
        await buffer.append(txn, message(text, T2 if txn == T2 else None), 1)
    await buffer.end(T1, TxnAction.ABORT, 2)
    await buffer.end(T2, TxnAction.COMMIT, 3)
    assert await visible(ledger, buffer) == ["j1"]
    stored = (await ledger.read_entry(Position(ledger.last_confirmed.ledger_id, 1))).data
    assert stored == message("j1", T2)

    restarted = await storage.restarted().open_managed_ledger(TOPIC)
    again, _ = await started(restarted)
    assert await visible(restarted, again) == ["j1"]
