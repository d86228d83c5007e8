"""One topic's transactional writes: Pulsar's transaction buffer, on the topic's own ledger.

A transactional SEND is stored in the topic like any entry (its metadata names the
transaction); readers must not see it before the transaction commits, nor ever if it
aborts. Three things make it so:

- the **max read position**: the entry before the first one of the oldest transaction
  still open on the topic. The managed ledger's cursors read no further
  (``ManagedLedger.read_limit``); while a transactional write is in flight the limit is
  what was confirmed before it, since its position is not known yet;
- **markers**: ending a transaction on the topic appends a commit or abort marker entry,
  then moves the limit. Markers are never dispatched;
- the **aborted set**: entries of aborted transactions are skipped (and acknowledged)
  where they are dispatched.

The state is recovered on load from a snapshot (a ledger property: the aborted set, the
open transactions and the position they are complete up to) plus the entries after it,
so loading reads at most what was written since the last snapshot. A topic never written
in a transaction has no snapshot and costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import BrokerError, PermanentError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.framing import encode_message, parse_message, parse_metadata_only
from dedup_broker.storage.api import ManagedLedger, Position, readable_end
from dedup_broker.transactions.coordinator_state import TxnAction, TxnId

log = logging.getLogger(__name__)

TXN_COMMIT_MARKER = 21
"""Pulsar's ``MarkerType.TXN_COMMIT``."""
TXN_ABORT_MARKER = 22
"""Pulsar's ``MarkerType.TXN_ABORT``."""
SNAPSHOT_PROPERTY = "pulsar.transaction-buffer.snapshot"
"""The ledger property holding the buffer's snapshot; absent on topics never written in a
transaction."""
ENDED_REMEMBERED = 10_000
"""Committed transactions remembered per topic, to refuse their late writes."""
_RECOVERY_BATCH = 500


class TransactionEndedError(PermanentError):
    """A transactional SEND for a transaction that already ended on this topic."""


class TransactionsDisabledError(PermanentError):
    """A transactional command on a broker without ``transactionCoordinatorEnabled``."""


DISABLED_MESSAGE = "The broker doesn't enable the transaction coordinator"
"""What Pulsar answers when transactions are off."""


def sent_in(send: pb.CommandSend) -> TxnId | None:
    """The transaction a SEND belongs to, None when it belongs to none."""
    if not send.HasField("txnid_most_bits"):
        return None
    return TxnId(send.txnid_most_bits, send.txnid_least_bits)


def with_transaction(entry: bytes, txn_id: TxnId) -> bytes:
    """``entry`` with its transaction in its metadata, as the Java and C++ clients write
    it. The Go client names the transaction in the SEND only (apache/pulsar-client-go
    #1498); readers, and this buffer's recovery, tell an aborted transaction's entries by
    their metadata, so without it they would be delivered after the abort."""
    metadata = parse_metadata_only(entry)
    if metadata.HasField("txnid_most_bits") and metadata.HasField("txnid_least_bits"):
        return entry
    parsed = parse_message(entry)
    parsed.metadata.txnid_most_bits = txn_id.most
    parsed.metadata.txnid_least_bits = txn_id.least
    return encode_message(parsed.metadata, parsed.payload)


def marker_entry(txn_id: TxnId, action: TxnAction, publish_time_ms: int) -> bytes:
    """A commit or abort marker entry, as Pulsar writes it into the topic."""
    metadata = pb.MessageMetadata(
        producer_name="",
        sequence_id=0,
        publish_time=publish_time_ms,
        marker_type=TXN_COMMIT_MARKER if action is TxnAction.COMMIT else TXN_ABORT_MARKER,
        txnid_most_bits=txn_id.most,
        txnid_least_bits=txn_id.least,
    )
    return encode_message(metadata, b"")


_NOTHING_OPEN: dict[TxnId, Position] = {}
_NOTHING_ABORTED: dict[TxnId, int] = {}
_NOTHING_COMMITTED: OrderedDict[TxnId, None] = OrderedDict()
_NOTHING_HELD: dict[int, Position] = {}
"""Shared by every buffer that never saw a transaction (never written to)."""


class TransactionBuffer:
    __slots__ = (
        "_aborted",
        "_changes",
        "_committed",
        "_enabled",
        "_holds",
        "_ledger",
        "_limit_raised",
        "_next_hold",
        "_open",
        "_snapshot_every",
        "_snapshot_ms",
        "_starting",
        "used",
    )

    def __init__(
        self, ledger: ManagedLedger, config: BrokerConfig, limit_raised: Callable[[], None]
    ) -> None:
        self._ledger = ledger
        self._limit_raised = limit_raised
        self._enabled = config.transaction_coordinator_enabled
        self._snapshot_every = config.transaction_buffer_snapshot_max_transaction_count
        self.used = SNAPSHOT_PROPERTY in ledger.properties
        """The topic has had a transactional write (it has a snapshot)."""
        # Shared empty containers until the topic sees a transaction (most never do).
        self._open: dict[TxnId, Position] = _NOTHING_OPEN
        """Open transactions on the topic -> the position of their first entry."""
        self._aborted: dict[TxnId, int] = _NOTHING_ABORTED
        """Aborted transactions whose entries may still be in the topic -> the ledger of
        their last entry (they leave once that ledger is trimmed)."""
        self._committed: OrderedDict[TxnId, None] = _NOTHING_COMMITTED
        self._holds: dict[int, Position] = _NOTHING_HELD
        """Writes of this buffer in flight -> what was confirmed when they started."""
        self._next_hold = 0
        self._changes = 0
        self._snapshot_ms = 0
        self._starting: asyncio.Task[None] | None = None

    def _in_use(self) -> None:
        """Containers of its own, before the first change."""
        if self._holds is _NOTHING_HELD:
            self._open, self._aborted, self._holds = {}, {}, {}
            self._committed = OrderedDict()

    # --- reading ------------------------------------------------------------------------
    def max_read_position(self) -> Position | None:
        """The last entry readers may see; None: no transaction holds them back."""
        limits = list(self._holds.values())
        if self._open:
            limits.append(self._ledger.previous_position(min(self._open.values())))
        return min(limits) if limits else None

    def hidden(self, data: bytes) -> bool:
        """A marker, or a message of an aborted transaction: never delivered."""
        if not self.used:
            return False
        try:
            metadata = parse_metadata_only(data)
        except BrokerError:
            return False
        if metadata.HasField("marker_type"):
            return True
        if not metadata.HasField("txnid_most_bits"):
            return False
        return TxnId(metadata.txnid_most_bits, metadata.txnid_least_bits) in self._aborted

    def open_transactions(self) -> dict[TxnId, Position]:
        return dict(self._open)

    def stats(self) -> dict[str, object]:
        """Pulsar's ``TransactionBufferStats``."""
        return {
            "state": "Ready" if self._enabled else "NoSnapshot",
            "maxReadPosition": str(readable_end(self._ledger)),
            "lastSnapshotTimestamps": self._snapshot_ms,
            "ongoingTxnSize": len(self._open),
            "totalAbortedTransactions": len(self._aborted),
            "recoverStartTime": 0,
            "recoverEndTime": 0,
        }

    def transaction_stats(self, txn_id: TxnId) -> dict[str, object]:
        """Pulsar's ``TransactionInBufferStats``: where the transaction's entries start
        (while it is open) and whether it aborted."""
        start = self._open.get(txn_id)
        return {"startPosition": str(start) if start else None, "aborted": txn_id in self._aborted}

    def aborted_transactions(self) -> list[TxnId]:
        return list(self._aborted)

    async def last_visible(self) -> Position:
        """The last entry a reader may receive: at or before the max read position, not a
        marker nor an aborted transaction's (its ledger's ``(L, -1)`` if there is none
        left in that ledger)."""
        position = readable_end(self._ledger)
        if not self.used:
            return position
        while position.entry_id >= 0:
            entry = await self._ledger.read_entry(position)
            if not self.hidden(entry.data):
                break
            position = Position(position.ledger_id, position.entry_id - 1)
        return position

    # --- writing ------------------------------------------------------------------------
    def admit(self, txn_id: TxnId) -> bool:
        """Whether a SEND of ``txn_id`` may be written now; raises when it never may.

        The first transactional write on a topic waits for the buffer's snapshot to be
        stored (so that a reload knows to look for open transactions): it starts that here,
        and the caller asks again."""
        if not self._enabled:
            raise TransactionsDisabledError(DISABLED_MESSAGE)
        self._in_use()
        if txn_id in self._aborted or txn_id in self._committed:
            raise TransactionEndedError(
                f"transaction {txn_id} already ended on {self._ledger.name}"
            )
        if self.used:
            return True
        if self._starting is None or self._starting.done():
            self._starting = asyncio.get_running_loop().create_task(self._start_using())
        return False

    async def _start_using(self) -> None:
        try:
            await self._store_snapshot()
        except BrokerError as exc:
            log.warning("%s: storing the transaction buffer's first snapshot: %s", self, exc)

    def append(
        self, txn_id: TxnId | None, entry: bytes, timestamp: int
    ) -> asyncio.Future[Position]:
        """Store an entry (of a transaction :meth:`admit` let through: readers do not pass
        it until its transaction commits)."""
        if txn_id is None:
            return self._ledger.append(entry, timestamp)
        return self._held_append(with_transaction(entry, txn_id), timestamp, txn_id)

    def _held_append(
        self, entry: bytes, timestamp: int, txn_id: TxnId | None = None
    ) -> asyncio.Future[Position]:
        """Append with reads held at what is confirmed now until the write settles (and,
        for an entry of ``txn_id``, until its transaction is known open here)."""
        hold = self._next_hold
        self._next_hold += 1
        self._holds[hold] = self._ledger.last_confirmed
        self._apply_limit()
        appended = self._ledger.append(entry, timestamp)

        def settled(done: asyncio.Future[Position]) -> None:
            if txn_id is not None and not done.cancelled() and done.exception() is None:
                self._open.setdefault(txn_id, done.result())
            del self._holds[hold]
            self._apply_limit()

        appended.add_done_callback(settled)
        return appended

    async def end(self, txn_id: TxnId, action: TxnAction, now_ms: int) -> None:
        """END_TXN_ON_PARTITION: the marker is stored, then readers see the transaction's
        entries (commit) or skip them for good (abort). Safe to repeat."""
        if txn_id in self._committed or txn_id in self._aborted:
            return
        self._in_use()
        if not self.used:
            await self._store_snapshot()
        position = await self._held_append(marker_entry(txn_id, action, now_ms), now_ms)
        self._ended(txn_id, action, position)
        self._apply_limit()
        self._changes += 1
        if self._changes >= self._snapshot_every:
            await self.snapshot()

    def _ended(self, txn_id: TxnId, action: TxnAction, marker: Position) -> None:
        self._open.pop(txn_id, None)
        if action is TxnAction.ABORT:
            self._aborted[txn_id] = marker.ledger_id
        else:
            self._committed[txn_id] = None
            while len(self._committed) > ENDED_REMEMBERED:
                self._committed.popitem(last=False)

    def _apply_limit(self) -> None:
        """Hand the max read position to the cursors; wake the readers when it rose."""
        before = self._ledger.read_limit
        after = self._ledger.read_limit = self.max_read_position()
        if before is not None and (after is None or after > before):
            self._limit_raised()

    # --- snapshots and recovery ---------------------------------------------------------
    async def snapshot(self) -> None:
        """Store the state if it changed (after so many endings, on housekeeping, on
        close); aborted transactions whose ledgers were trimmed leave it."""
        if self.used and self._changes:
            await self._store_snapshot()

    async def _store_snapshot(self) -> None:
        first_ledger = self._ledger.first_position().ledger_id
        for gone in [t for t, ledger in self._aborted.items() if ledger < first_ledger]:
            del self._aborted[gone]
        complete_up_to = min([self._ledger.last_confirmed, *self._holds.values()])
        changes = self._changes
        snapshot = {
            "at": [complete_up_to.ledger_id, complete_up_to.entry_id],
            "aborted": [[t.most, t.least, ledger] for t, ledger in self._aborted.items()],
            "open": [[t.most, t.least, p.ledger_id, p.entry_id] for t, p in self._open.items()],
        }
        properties = self._ledger.properties
        properties[SNAPSHOT_PROPERTY] = json.dumps(snapshot, separators=(",", ":"))
        await self._ledger.set_properties(properties)
        self._snapshot_ms = int(time.time() * 1000)
        self.used = True
        self._changes -= changes

    async def recover(self) -> None:
        """The state as the snapshot left it, then every entry written after it."""
        stored = self._ledger.properties.get(SNAPSHOT_PROPERTY)
        if stored is None:
            return
        snapshot = json.loads(stored)
        self._in_use()
        self._aborted = {TxnId(m, lst): ledger for m, lst, ledger in snapshot["aborted"]}
        self._open = {TxnId(m, lst): Position(le, en) for m, lst, le, en in snapshot["open"]}
        position = self._ledger.next_position(Position(*snapshot["at"]))
        end = self._ledger.last_confirmed
        while position <= end:
            entries = await self._ledger.read_entries(position, _RECOVERY_BATCH)
            if not entries:
                break
            for entry in entries:
                self._replay(entry.position, entry.data)
            position = self._ledger.next_position(entries[-1].position)
        self._apply_limit()
        if self._open:
            log.info("%s: %d transactions open after recovery", self._ledger.name, len(self._open))

    def _replay(self, position: Position, data: bytes) -> None:
        try:
            metadata = parse_metadata_only(data)
        except BrokerError:
            return
        if not metadata.HasField("txnid_most_bits"):
            return
        txn_id = TxnId(metadata.txnid_most_bits, metadata.txnid_least_bits)
        if metadata.marker_type == TXN_COMMIT_MARKER:
            self._ended(txn_id, TxnAction.COMMIT, position)
        elif metadata.marker_type == TXN_ABORT_MARKER:
            self._ended(txn_id, TxnAction.ABORT, position)
        elif txn_id not in self._aborted and txn_id not in self._committed:
            self._open.setdefault(txn_id, position)
        self._changes += 1

    async def close(self) -> None:
        """Store the last state (the next load replays less; if it cannot be stored, for
        instance because another broker took the topic, the next load replays more)."""
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        try:
            await self.snapshot()
        except BrokerError as exc:
            log.warning("%s: the transaction buffer's snapshot was not stored: %s", self, exc)

    def __repr__(self) -> str:
        return f"TransactionBuffer({self._ledger.name!r}, open={len(self._open)})"
