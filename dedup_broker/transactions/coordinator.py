"""One transaction coordinator at work: requests persisted before they are answered, and
every transaction driven to its end (Pulsar's ``TransactionMetadataStore`` with its
``TransactionMetadataStoreService`` end-of-transaction steps).

Changes are written one at a time, so the log's order is the order in which the state
changed. Ending a transaction has three steps: the COMMITTING (or ABORTING) record, the
ending applied on every partition written and every subscription acknowledged in it
(through a :class:`TransactionEnder`: the topics' transaction buffers and pending
acknowledgements), then the COMMITTED (or ABORTED) record. Each step may be repeated,
so a coordinator that recovers a transaction mid-ending simply drives it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from dedup_broker.errors import BrokerError, RetriableError
from dedup_broker.transactions.coordinator_log import CoordinatorLog
from dedup_broker.transactions.coordinator_state import (
    TransactionMeta,
    TxnAction,
    TxnId,
    TxnStatus,
)
from dedup_broker.transactions.errors import (
    CoordinatorNotReadyError,
    InvalidTxnStatusError,
    TransactionNotFoundError,
)

ENDING_PATIENCE_SECONDS = 25.0
"""How long END_TXN keeps driving an ending that meets retriable failures before it
answers with the error (the clients' operation timeout is 30 s); the coordinator drives it
again in the background after that."""
ENDING_RETRY_SECONDS = 0.5


class TransactionEnder(Protocol):
    """Applies a transaction's ending where it wrote and where it acknowledged. Both
    calls must be safe to repeat."""

    async def end_on_partition(
        self, topic: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None: ...

    async def end_on_subscription(
        self, topic: str, subscription: str, txn_id: TxnId, action: TxnAction, low_watermark: int
    ) -> None: ...


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CoordinatorCounts:
    """Totals since this broker recovered the coordinator (Pulsar's ``pulsar_txn_*``)."""

    created: int = 0
    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    appended: int = 0
    """Records written to the log."""


class TransactionCoordinator:
    def __init__(
        self,
        log: CoordinatorLog,
        ender: TransactionEnder,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._log = log
        self._state = log.state
        self._ender = ender
        self._clock_ms = clock_ms
        self._writes = asyncio.Lock()
        self.counts = CoordinatorCounts()
        self.recovered_at_ms = clock_ms()
        self.broken: BaseException | None = None
        """A write failed: the state may be ahead of the log; the coordinator is recovered
        again from the log before it answers anything more."""

    @property
    def coordinator_id(self) -> int:
        return self._state.coordinator_id

    # --- requests ---------------------------------------------------------------------
    async def new_txn(self, timeout_ms: int, owner: str | None = None) -> TxnId:
        async with self._writes:
            self._check_usable()
            await self._log.reserve_ids()  # rare (a block of ids): waited for in turn
        meta = await self._change(lambda: self._state.open(self._clock_ms(), timeout_ms, owner))
        assert meta is not None
        self.counts.created += 1
        return meta.txn_id

    async def add_partitions(self, txn_id: TxnId, partitions: Iterable[str]) -> None:
        await self._change(lambda: self._state.add_partitions(txn_id, partitions, self._clock_ms()))

    async def add_subscriptions(
        self, txn_id: TxnId, subscriptions: Iterable[tuple[str, str]]
    ) -> None:
        await self._change(
            lambda: self._state.add_subscriptions(txn_id, subscriptions, self._clock_ms())
        )

    async def _change(self, decide: Callable[[], TransactionMeta | None]) -> TransactionMeta | None:
        """Decide a change on the state as it stands (the changes on their way included)
        and write it; returns once it is persisted. Changes are decided one at a time but
        written without waiting for each other (the log keeps their order)."""
        async with self._writes:
            self._check_usable()
            meta = decide()
            if meta is None:
                return None
            pending = self._log.start_write(meta)
        try:
            position = await pending
        except BrokerError as exc:
            self.broken = exc
            raise CoordinatorNotReadyError(
                f"transaction coordinator {self.coordinator_id} lost a write ({exc}); "
                "it recovers from its log"
            ) from exc
        self._log.written(meta, position)
        self.counts.appended += 1
        return meta

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise CoordinatorNotReadyError(
                f"transaction coordinator {self.coordinator_id} recovers from its log"
            )

    async def end_txn(self, txn_id: TxnId, action: TxnAction) -> TransactionMeta:
        """END_TXN: returns once the transaction ended that way (a retry while it is
        ending drives the same ending; once ended, it is ``TransactionNotFound``)."""
        await self._change(lambda: self._state.end(txn_id, action, self._clock_ms()))
        deadline = time.monotonic() + ENDING_PATIENCE_SECONDS
        while True:
            try:
                return await self._drive(txn_id)
            except RetriableError:
                # A topic's owner is gone or moving: the outcome is decided (recorded
                # above), so the ending is retried until the topics take it.
                if time.monotonic() >= deadline or self.broken is not None:
                    raise
                await asyncio.sleep(ENDING_RETRY_SECONDS)

    def get(self, txn_id: TxnId) -> TransactionMeta:
        return self._state.get(txn_id)

    def live(self) -> list[TransactionMeta]:
        return self._state.live()

    def stats(self) -> dict[str, object]:
        """Pulsar's ``TransactionCoordinatorStats``."""
        return {
            "state": "Ready",
            "leastSigBits": self._state.last_sequence,
            "lowWaterMark": self._state.low_watermark,
            "ongoingTxnSize": len(self._state.live()),
            "recoverStartTime": self.recovered_at_ms,
            "recoverEndTime": self.recovered_at_ms,
        }

    # --- housekeeping -----------------------------------------------------------------
    async def abort_timed_out(self) -> list[TxnId]:
        """Abort every open transaction past its timeout; the ones aborted."""
        aborted = []
        for txn_id in self._state.timed_out(self._clock_ms()):
            try:
                await self.end_txn(txn_id, TxnAction.ABORT)
            except (InvalidTxnStatusError, TransactionNotFoundError):
                continue  # its client ended it meanwhile
            aborted.append(txn_id)
            self.counts.timed_out += 1
        return aborted

    async def resume_endings(self) -> None:
        """Drive again every transaction left committing or aborting (after a recovery,
        or after an ending that failed half-way)."""
        for meta in self._state.ending():
            await self._drive(meta.txn_id)

    async def _drive(self, txn_id: TxnId) -> TransactionMeta:
        meta = self._state.get(txn_id)
        if meta.ended:
            return meta
        action = TxnAction.COMMIT if meta.status == TxnStatus.COMMITTING else TxnAction.ABORT
        low = self._state.low_watermark
        await asyncio.gather(
            *(self._ender.end_on_partition(p, txn_id, action, low) for p in meta.partitions),
            *(
                self._ender.end_on_subscription(topic, sub, txn_id, action, low)
                for topic, sub in meta.subscriptions
            ),
        )
        final = await self._change(
            lambda: (
                None
                if self._state.get(txn_id).ended
                else self._state.finished(txn_id, self._clock_ms())
            )
        )
        if final is None:  # ended meanwhile (another drive of the same ending)
            return self._state.get(txn_id)
        if final.status == TxnStatus.COMMITTED:
            self.counts.committed += 1
        else:
            self.counts.aborted += 1
        return final

    async def close(self) -> None:
        async with self._writes:
            await self._log.close()
