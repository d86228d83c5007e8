"""Acknowledgements made in a transaction (Pulsar's pending acks).

An ACK that names a transaction does not move the subscription: it is held until the
transaction ends, then applied (commit) or released for redelivery (abort). Per
subscription, :class:`PendingAcks` keeps what is held and refuses conflicts as Pulsar
does: a message already acknowledged, or held by another transaction, cannot be
acknowledged in a transaction (``TransactionConflict``).

Per topic, :class:`PendingAckLog` keeps them across a crash or a handover: a managed
ledger (Pulsar's ``<topic>-<subscription>__transaction_pending_ack``, here one per topic
for all its subscriptions) of records "held" and "ended", opened with the topic's write
fence. A cursor on it moves past records whose transactions all ended.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from dedup_broker.errors import PermanentError
from dedup_broker.storage.api import ManagedCursor, ManagedLedger, Position
from dedup_broker.transactions.coordinator_state import TxnId

log = logging.getLogger(__name__)

LOG_CURSOR = "pulsar.pending-ack"
_HELD = b"A"
_ENDED = b"E"
_READ_BATCH = 500


class TransactionConflictError(PermanentError):
    """The message is acknowledged already, or held by another transaction (Pulsar's
    ``TransactionConflict``)."""


@dataclass
class HeldAcks:
    """One transaction's acknowledgements on one subscription."""

    whole: set[Position] = field(default_factory=set)
    parts: dict[Position, tuple[int, ...]] = field(default_factory=dict)
    """Batches acknowledged in part -> bits of their messages still unacknowledged."""
    cumulative: Position | None = None

    def positions(self) -> set[Position]:
        return self.whole | set(self.parts)

    def merge(self, other: HeldAcks) -> None:
        self.whole |= other.whole
        for position, unacked in other.parts.items():
            before = self.parts.get(position)
            self.parts[position] = (
                unacked
                if before is None
                else tuple(a & b for a, b in zip(before, unacked, strict=False))
            )
        if other.cumulative is not None:
            self.cumulative = max(other.cumulative, self.cumulative or other.cumulative)

    def encode(self) -> list[object]:
        return [
            [[p.ledger_id, p.entry_id] for p in sorted(self.whole)],
            [[p.ledger_id, p.entry_id, list(w)] for p, w in sorted(self.parts.items())],
            [self.cumulative.ledger_id, self.cumulative.entry_id] if self.cumulative else None,
        ]

    @classmethod
    def decode(cls, raw: list[object]) -> HeldAcks:
        whole, parts, cumulative = raw
        assert isinstance(whole, list) and isinstance(parts, list)
        return cls(
            {Position(int(le), int(en)) for le, en in whole},
            {Position(int(le), int(en)): tuple(int(x) for x in w) for le, en, w in parts},
            Position(int(cumulative[0]), int(cumulative[1]))  # type: ignore[index]
            if cumulative
            else None,
        )


class PendingAcks:
    """One subscription's acknowledgements held in transactions."""

    def __init__(self) -> None:
        self.held: dict[TxnId, HeldAcks] = {}
        self._holder: dict[Position, TxnId] = {}
        self._cumulative_holder: TxnId | None = None
        self._cumulative_up_to: Position | None = None

    def check(self, txn_id: TxnId, acks: HeldAcks, acknowledged: set[Position]) -> None:
        """Raise ``TransactionConflictError`` unless ``txn_id`` may hold ``acks``
        (``acknowledged``: those of their positions the subscription has acknowledged)."""
        for position in acks.positions():
            holder = self._holder.get(position)
            if holder is not None and holder != txn_id:
                raise TransactionConflictError(
                    f"message {position} is acknowledged in transaction {holder}"
                )
            if position in acknowledged:
                raise TransactionConflictError(f"message {position} is acknowledged already")
        if acks.cumulative is not None:
            holder = self._cumulative_holder
            if holder is not None and holder != txn_id:
                raise TransactionConflictError(
                    f"transaction {holder} holds a cumulative acknowledgement"
                )

    def hold(self, txn_id: TxnId, acks: HeldAcks) -> None:
        self.held.setdefault(txn_id, HeldAcks()).merge(acks)
        for position in acks.positions():
            self._holder[position] = txn_id
        if acks.cumulative is not None:
            self._cumulative_holder = txn_id
            self._cumulative_up_to = self.held[txn_id].cumulative

    def release(self, txn_id: TxnId) -> HeldAcks | None:
        """What ``txn_id`` held, no longer held."""
        acks = self.held.pop(txn_id, None)
        if acks is None:
            return None
        for position in acks.positions():
            if self._holder.get(position) == txn_id:
                del self._holder[position]
        if self._cumulative_holder == txn_id:
            self._cumulative_holder = self._cumulative_up_to = None
        return acks

    def holds(self, position: Position) -> bool:
        """Acknowledged in an open transaction (one by one, or up to a cumulative
        acknowledgement's position): not delivered again meanwhile."""
        up_to = self._cumulative_up_to
        return position in self._holder or (up_to is not None and position <= up_to)


class PendingAckLog:
    """One topic's held acknowledgements, recorded before they count."""

    def __init__(self, ledger: ManagedLedger, cursor: ManagedCursor) -> None:
        self._ledger = ledger
        self._cursor = cursor
        self._first_records: dict[tuple[str, TxnId], Position] = {}

    @classmethod
    async def recover(
        cls, ledger: ManagedLedger
    ) -> tuple[PendingAckLog, dict[str, dict[TxnId, HeldAcks]]]:
        """The log and, per subscription, the acknowledgements still held."""
        cursor = await ledger.cursors.open(LOG_CURSOR, initial_position="earliest")
        held: dict[str, dict[TxnId, HeldAcks]] = {}
        firsts: dict[tuple[str, TxnId], Position] = {}
        while cursor.has_more_entries():
            for entry in await cursor.read_entries(_READ_BATCH):
                kind, raw = entry.data[:1], json.loads(entry.data[1:])
                subscription, txn_id = str(raw["s"]), TxnId(*raw["t"])
                if kind == _HELD:
                    acks = HeldAcks.decode(raw["a"])
                    held.setdefault(subscription, {}).setdefault(txn_id, HeldAcks()).merge(acks)
                    firsts.setdefault((subscription, txn_id), entry.position)
                elif kind == _ENDED:
                    held.get(subscription, {}).pop(txn_id, None)
                    firsts.pop((subscription, txn_id), None)
        recovered = cls(ledger, cursor)
        recovered._first_records = firsts
        return recovered, held

    async def held(self, subscription: str, txn_id: TxnId, acks: HeldAcks) -> None:
        record = {"s": subscription, "t": [txn_id.most, txn_id.least], "a": acks.encode()}
        position = await self._ledger.append(_HELD + json.dumps(record).encode(), 0)
        self._first_records.setdefault((subscription, txn_id), position)

    async def ended(self, subscription: str, txn_id: TxnId) -> None:
        record = {"s": subscription, "t": [txn_id.most, txn_id.least]}
        await self._ledger.append(_ENDED + json.dumps(record).encode(), 0)
        self._first_records.pop((subscription, txn_id), None)
        needed = list(self._first_records.values())
        last = self._ledger.last_confirmed
        before = self._ledger.previous_position(min(needed)) if needed else last
        if before > self._cursor.mark_delete_position:
            self._cursor.mark_delete(before)

    async def close(self) -> None:
        await self._cursor.flush()
        await self._ledger.close()
