"""A coordinator's transaction log: Pulsar's ``__transaction_log_N`` on this storage.

A managed ledger of records, each the whole metadata of one transaction after a change,
or a reservation of transaction ids. Its managed ledger is opened with the write fence of
the slot that owns the coordinator, so a broker that lost the coordinator cannot append
to it. Recovery reads from the log cursor's mark-delete position to the end; the last
record of each transaction is its state. The cursor moves past a record once it can no
longer matter: every transaction whose records lie before that point has ended, and the
last reservation lies after it (a log without its reservation would hand out ids again).
"""

from __future__ import annotations

import asyncio
import logging

from dedup_broker.storage.api import ManagedCursor, ManagedLedger, Position
from dedup_broker.transactions.coordinator_state import (
    CoordinatorState,
    TransactionMeta,
    TxnId,
    decode_reservation,
    encode_reservation,
)

log = logging.getLogger(__name__)

LOG_CURSOR = "pulsar.transaction-log"
_META = b"T"
_RESERVATION = b"R"
_READ_BATCH = 500


def log_ledger_name(coordinator_id: int) -> str:
    """The coordinator's managed ledger, named as Pulsar names its topic."""
    return f"pulsar/system/persistent/__transaction_log_{coordinator_id}"


class CoordinatorLog:
    """Appends a coordinator's changes and recovers its state from them."""

    def __init__(self, ledger: ManagedLedger, cursor: ManagedCursor, state: CoordinatorState):
        self._ledger = ledger
        self._cursor = cursor
        self.state = state
        self._first_records: dict[TxnId, Position] = {}
        """Per live transaction, the position of its oldest record still needed."""
        self._last_reservation: Position | None = None

    @classmethod
    async def recover(cls, ledger: ManagedLedger, coordinator_id: int) -> CoordinatorLog:
        """Read the log from its cursor to its end: the coordinator as it was left."""
        cursor = await ledger.cursors.open(LOG_CURSOR, initial_position="earliest")
        latest: dict[TxnId, TransactionMeta] = {}
        firsts: dict[TxnId, Position] = {}
        reserved_until = 0
        last_reservation: Position | None = None
        while cursor.has_more_entries():
            for entry in await cursor.read_entries(_READ_BATCH):
                kind, body = entry.data[:1], entry.data[1:]
                if kind == _META:
                    meta = TransactionMeta.decode(body)
                    latest[meta.txn_id] = meta
                    firsts.setdefault(meta.txn_id, entry.position)
                elif kind == _RESERVATION:
                    reserved_until = max(reserved_until, decode_reservation(body))
                    last_reservation = entry.position
                else:
                    log.warning(
                        "%s: record of unknown kind %r at %s skipped",
                        ledger.name,
                        kind,
                        entry.position,
                    )
        state = CoordinatorState(coordinator_id)
        state.recover(sorted(latest.values(), key=lambda m: m.txn_id), reserved_until)
        recovered = cls(ledger, cursor, state)
        recovered._first_records = {
            txn_id: firsts[txn_id] for txn_id in latest if not latest[txn_id].ended
        }
        recovered._last_reservation = last_reservation
        return recovered

    async def write(self, meta: TransactionMeta) -> None:
        """Persist ``meta``, then make it the transaction's state."""
        self.written(meta, await self.start_write(meta))

    def start_write(self, meta: TransactionMeta) -> asyncio.Future[Position]:
        """Append ``meta`` and make it the transaction's state at once, so that the next
        change builds on it while this one is on its way; :meth:`written` once the future
        gives the position. Appends are stored in the order they were made, and one that
        fails fails the ones behind it: the caller then gives the state up (it is ahead of
        the log) and recovers it from the log."""
        appended = self._ledger.append(_META + meta.encode(), 0)
        self.state.apply(meta)
        return appended

    def written(self, meta: TransactionMeta, position: Position) -> None:
        if meta.ended:
            self._first_records.pop(meta.txn_id, None)
            self._trim()
        else:
            self._first_records.setdefault(meta.txn_id, position)

    async def reserve_ids(self) -> None:
        """Persist a reservation of the next block of ids if the current one is used up."""
        until = self.state.reservation_needed()
        if until is None:
            return
        self._last_reservation = await self._ledger.append(
            _RESERVATION + encode_reservation(until), 0
        )
        self.state.reserved(until)
        self._trim()

    def _trim(self) -> None:
        """Move the cursor to just before the oldest record still needed."""
        needed = list(self._first_records.values())
        if self._last_reservation is not None:
            needed.append(self._last_reservation)
        if not needed:
            return
        before = self._ledger.previous_position(min(needed))
        if before > self._cursor.mark_delete_position:
            self._cursor.mark_delete(before)

    async def close(self) -> None:
        await self._cursor.flush()
        await self._ledger.close()
