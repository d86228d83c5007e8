"""One transaction coordinator's transactions, without IO (Pulsar's PIP-31 coordinator).

Every request that changes a transaction returns the transaction's new metadata as a
value; the caller persists it (a record in the coordinator's log, coordinator_log.py)
and only then calls :meth:`CoordinatorState.apply` and answers the client. Recovery
replays the log's records through the same ``apply``, so what a client was told is
exactly what a new owner of the coordinator finds.

Transaction ids are ``(coordinator id, sequence)``, Pulsar's ``(mostSigBits,
leastSigBits)``. Sequences are reserved in blocks (one record per ``ID_BLOCK`` ids, not
one per transaction): after a failover the new owner starts after the last reserved
block, so no id is ever handed out twice, at the cost of skipping the rest of a block.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from dedup_broker.transactions.errors import (
    CoordinatorNotReadyError,
    InvalidTxnStatusError,
    TransactionNotFoundError,
)

ID_BLOCK = 1_000
"""Transaction ids reserved per reservation record."""
ENDED_REMEMBERED = 10_000
"""Ended transactions kept for the admin routes (a transaction's metadata shows how it
ended); to every client request they are unknown, as in Pulsar."""


class TxnStatus(Enum):
    """Pulsar's transaction statuses (``TxnStatus`` in its coordinator metadata)."""

    OPEN = 0
    COMMITTING = 1
    COMMITTED = 2
    ABORTING = 3
    ABORTED = 4


class TxnAction(Enum):
    """What END_TXN asks (Pulsar's ``TxnAction``)."""

    COMMIT = 0
    ABORT = 1


_ENDING = {TxnAction.COMMIT: TxnStatus.COMMITTING, TxnAction.ABORT: TxnStatus.ABORTING}
_ENDED = {TxnStatus.COMMITTING: TxnStatus.COMMITTED, TxnStatus.ABORTING: TxnStatus.ABORTED}
_ACTION_OF = {
    TxnStatus.COMMITTING: TxnAction.COMMIT,
    TxnStatus.COMMITTED: TxnAction.COMMIT,
    TxnStatus.ABORTING: TxnAction.ABORT,
    TxnStatus.ABORTED: TxnAction.ABORT,
}


@dataclass(frozen=True, slots=True, order=True)
class TxnId:
    most: int
    """The coordinator's id."""
    least: int
    """The sequence within that coordinator."""

    def __str__(self) -> str:
        return f"({self.most},{self.least})"

    @property
    def key(self) -> bytes:
        """The transaction's id as a byte key (for keyed stores such as pending acks)."""
        return f"txn:{self.most}:{self.least}".encode()


@dataclass(frozen=True, slots=True)
class TransactionMeta:
    txn_id: TxnId
    status: TxnStatus
    opened_at_ms: int
    timeout_ms: int
    updated_at_ms: int
    owner: str | None = None
    """The authenticated role that opened it, if any: only it may use the transaction."""
    partitions: tuple[str, ...] = ()
    """Topic partitions written in the transaction, in the order added."""
    subscriptions: tuple[tuple[str, str], ...] = ()
    """(topic, subscription) acknowledged in the transaction, in the order added."""

    @property
    def deadline_ms(self) -> int:
        return self.opened_at_ms + self.timeout_ms

    @property
    def ended(self) -> bool:
        return self.status in (TxnStatus.COMMITTED, TxnStatus.ABORTED)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "id": [self.txn_id.most, self.txn_id.least],
                "status": self.status.name,
                "opened": self.opened_at_ms,
                "timeout": self.timeout_ms,
                "updated": self.updated_at_ms,
                "owner": self.owner,
                "partitions": list(self.partitions),
                "subscriptions": [list(s) for s in self.subscriptions],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> TransactionMeta:
        raw = json.loads(data)
        most, least = raw["id"]
        return cls(
            TxnId(int(most), int(least)),
            TxnStatus[raw["status"]],
            int(raw["opened"]),
            int(raw["timeout"]),
            int(raw["updated"]),
            raw.get("owner"),
            tuple(raw.get("partitions", ())),
            tuple((topic, sub) for topic, sub in raw.get("subscriptions", ())),
        )


def encode_reservation(until: int) -> bytes:
    return json.dumps({"until": until}).encode()


def decode_reservation(data: bytes) -> int:
    return int(json.loads(data)["until"])


class CoordinatorState:
    """The live transactions of one coordinator and the ids it may hand out."""

    def __init__(self, coordinator_id: int) -> None:
        self.coordinator_id = coordinator_id
        self._live: dict[TxnId, TransactionMeta] = {}
        self._ended: OrderedDict[TxnId, TransactionMeta] = OrderedDict()
        self._next = 0
        self._reserved_until = 0

    # --- ids --------------------------------------------------------------------------
    def reservation_needed(self) -> int | None:
        """The reservation to persist before the next id may be handed out, if any."""
        if self._next < self._reserved_until:
            return None
        return self._next + ID_BLOCK

    def reserved(self, until: int) -> None:
        """A reservation of the ids below ``until`` is persisted."""
        self._reserved_until = max(self._reserved_until, until)

    def recover(self, metas: Iterable[TransactionMeta], reserved_until: int) -> None:
        """Replay of the coordinator's log: its transactions, and its last reservation,
        below which the previous owner may have handed out any id. The next id comes from
        a fresh reservation."""
        for meta in metas:
            self.apply(meta)
        self._next = max(self._next, reserved_until)
        self._reserved_until = self._next

    # --- requests ---------------------------------------------------------------------
    def open(self, now_ms: int, timeout_ms: int, owner: str | None = None) -> TransactionMeta:
        """NEW_TXN: the new transaction's metadata (its id taken, whether or not it is
        persisted: an id is never reused)."""
        if self._next >= self._reserved_until:
            raise CoordinatorNotReadyError("no transaction id reserved")
        txn_id = TxnId(self.coordinator_id, self._next)
        self._next += 1
        return TransactionMeta(txn_id, TxnStatus.OPEN, now_ms, timeout_ms, now_ms, owner)

    def add_partitions(
        self, txn_id: TxnId, partitions: Iterable[str], now_ms: int
    ) -> TransactionMeta | None:
        """ADD_PARTITION_TO_TXN: the new metadata, or None if every partition was added."""
        meta = self._open(txn_id, "add partitions to")
        new = tuple(dict.fromkeys(p for p in partitions if p not in meta.partitions))
        if not new:
            return None
        return replace(meta, partitions=meta.partitions + new, updated_at_ms=now_ms)

    def add_subscriptions(
        self, txn_id: TxnId, subscriptions: Iterable[tuple[str, str]], now_ms: int
    ) -> TransactionMeta | None:
        """ADD_SUBSCRIPTION_TO_TXN: the new metadata, or None if every one was added."""
        meta = self._open(txn_id, "add subscriptions to")
        known = set(meta.subscriptions)
        new = tuple(dict.fromkeys(s for s in subscriptions if s not in known))
        if not new:
            return None
        return replace(meta, subscriptions=meta.subscriptions + new, updated_at_ms=now_ms)

    def end(self, txn_id: TxnId, action: TxnAction, now_ms: int) -> TransactionMeta | None:
        """END_TXN: the transaction now committing or aborting; None if it already is: a
        retried END_TXN, whose ending the caller drives again. The other action than the
        one under way is refused; an ended transaction is not found any more (Pulsar's
        coordinator forgets it once ended, and its clients expect ``TransactionNotFound``
        for a second commit or abort)."""
        meta = self._live.get(txn_id)
        if meta is None:
            raise TransactionNotFoundError(f"transaction {txn_id} not found")
        if meta.status == TxnStatus.OPEN:
            return replace(meta, status=_ENDING[action], updated_at_ms=now_ms)
        if _ACTION_OF[meta.status] == action:
            return None
        raise InvalidTxnStatusError(
            f"cannot {action.name.lower()} transaction {txn_id}: it is {meta.status.name}"
        )

    def finished(self, txn_id: TxnId, now_ms: int) -> TransactionMeta:
        """Every partition and subscription applied the ending: the final metadata."""
        meta = self.get(txn_id)
        final = _ENDED.get(meta.status)
        if final is None:
            raise InvalidTxnStatusError(f"transaction {txn_id} is {meta.status.name}, not ending")
        return replace(meta, status=final, updated_at_ms=now_ms)

    # --- applying what was persisted ----------------------------------------------------
    def apply(self, meta: TransactionMeta) -> None:
        """``meta`` is persisted (or replayed): it is the transaction's state from now on."""
        txn_id = meta.txn_id
        if txn_id.least >= self._next:
            self._next = txn_id.least + 1
        if meta.ended:
            self._live.pop(txn_id, None)
            self._ended[txn_id] = meta
            self._ended.move_to_end(txn_id)
            while len(self._ended) > ENDED_REMEMBERED:
                self._ended.popitem(last=False)
        else:
            self._live[txn_id] = meta

    # --- queries ----------------------------------------------------------------------
    def get(self, txn_id: TxnId) -> TransactionMeta:
        meta = self._live.get(txn_id) or self._ended.get(txn_id)
        if meta is None:
            raise TransactionNotFoundError(f"transaction {txn_id} not found")
        return meta

    def timed_out(self, now_ms: int) -> list[TxnId]:
        """Open transactions past their timeout: the coordinator aborts them."""
        return [
            t
            for t, m in self._live.items()
            if m.status == TxnStatus.OPEN and m.deadline_ms <= now_ms
        ]

    def ending(self) -> list[TransactionMeta]:
        """Transactions committing or aborting: after a recovery their ending is driven
        again (every step of it may be repeated)."""
        return [m for m in self._live.values() if m.status in _ENDED]

    def live(self) -> list[TransactionMeta]:
        return list(self._live.values())

    @property
    def last_sequence(self) -> int:
        """The sequence of the last id handed out (or skipped over), -1 if none."""
        return self._next - 1

    @property
    def low_watermark(self) -> int:
        """Every transaction of this coordinator with a sequence at or below this one has
        ended (Pulsar's ``txnid_least_bits_of_low_watermark``)."""
        lowest = min((t.least for t in self._live), default=self._next)
        return lowest - 1

    def _open(self, txn_id: TxnId, what: str) -> TransactionMeta:
        meta = self._live.get(txn_id)
        if meta is None:  # never opened, or ended: unknown to clients, as in Pulsar
            raise TransactionNotFoundError(f"transaction {txn_id} not found")
        if meta.status != TxnStatus.OPEN:
            raise InvalidTxnStatusError(
                f"cannot {what} transaction {txn_id}: it is {meta.status.name}"
            )
        return meta
