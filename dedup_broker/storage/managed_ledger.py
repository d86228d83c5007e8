"""A managed ledger: one topic's ordered list of ledgers, its append path and its reads.

Append path: ``append`` hands the record to the shared producer at once, so call order
is storage order. Delivery reports come back in batches; futures resolve strictly in
call order, each after Kafka acknowledged its record (``acks=all``) at the expected
offset.

Failure rule: after a failed, timed-out or misplaced write nothing is guessed. The
managed ledger is "Fenced": every in-flight and new append fails. A recovery task waits
for every outstanding delivery report, seals the ledger topic, closes the ledger at the
end Kafka really has (records that landed although their report failed become visible
entries), opens a fresh ledger and tells ``on_write_failure_resolved`` what happened.

The ``ManagedLedgerInfo`` record is written only when ledgers are created or closed.
Before each such write the stored record is compared with the last one this instance
wrote: if another broker changed it, this instance stops ("Closed") instead of
overwriting the newer state.

Opening (the stored list after a crash) is ``ledger_opening.py``; rolling over
``ledger_rollover.py``; the recovery after a failed write ``ledger_recovery.py``; storing
the list, and the changes trimming, offloading and properties make to it,
``ledger_list_updates.py``; the read side (positions, reads, cursors) is
``ledger_view.py``; trimming is ``trimmer.py``, offloading to tiered storage
``offload_manager.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError

from dedup_broker.errors import (
    LedgerFencedError,
    ManagedLedgerClosedError,
    OwnershipLostError,
    StorageError,
)
from dedup_broker.lazy import LazyDeque, LazyEvent
from dedup_broker.storage import formats
from dedup_broker.storage.context import StorageContext
from dedup_broker.storage.cursor_registry import CursorRegistry
from dedup_broker.storage.deletion import LedgerToDelete, Retention
from dedup_broker.storage.entry_reader import EntryReader
from dedup_broker.storage.fencing import WriteFence
from dedup_broker.storage.info_store import LedgerInfoWriter
from dedup_broker.storage.kafka_producer import storage_error
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.ledger_list_updates import LedgerListUpdates
from dedup_broker.storage.ledger_opening import open_ledger_list
from dedup_broker.storage.ledger_recovery import LedgerRecovery
from dedup_broker.storage.ledger_rollover import LedgerRollover
from dedup_broker.storage.ledger_store import FIRST_ENTRY_OFFSET, now_ms
from dedup_broker.storage.ledger_view import ManagedLedgerView
from dedup_broker.storage.metadata_table import Table, WritesThrough
from dedup_broker.storage.offload_manager import LedgerOffloads
from dedup_broker.storage.position import Entry, LedgerInfo, Position
from dedup_broker.storage.status import CLOSED, FENCED, OPEN
from dedup_broker.storage.trimmer import LedgerTrimmer

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class _Append:
    """One append between the call and its settlement."""

    ledger: ManagedLedger
    data: bytes
    timestamp_ms: int
    future: asyncio.Future[Position]
    ledger_id: int = -1
    entry_id: int = -1
    reported: bool = False
    confirmed: bool = False
    """Acknowledged by Kafka and, with a write fence, by a commit begun after that."""
    settled: bool = False
    error: BaseException | None = None

    def on_delivery(self, error: KafkaError | None, offset: int) -> None:
        self.ledger._on_delivered(self, error, offset)


class ManagedLedger(LedgerRollover, LedgerRecovery, LedgerListUpdates, ManagedLedgerView):
    def __init__(
        self,
        name: str,
        ctx: StorageContext,
        on_closed: Callable[[ManagedLedger], None],
        fence: WriteFence | None = None,
    ) -> None:
        self.name = name
        self._ctx = ctx
        self.fence = fence
        """The slot's write fence (a cluster); ``None``: acknowledged as Kafka acknowledges."""
        self._awaiting_commit: list[_Append] = []
        self._list_lock = asyncio.Lock()
        """Held from computing a new ledger list to applying it: two writers (a rollover
        and an offload, say) must never store lists computed from the same old one."""
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._ledgers = LedgerList()
        self._last_confirmed = Position(-1, -1)
        self._properties: dict[str, str] = {}
        self._state = OPEN
        self._closing = False
        self._closed = LazyEvent(False)
        self._close_error: Exception | None = None
        # Append pipeline.
        self._inflight: LazyDeque[_Append] = LazyDeque()
        self._queued: LazyDeque[_Append] = LazyDeque()
        self._unreported = 0
        self._drained = LazyEvent(True)
        self._writable = LazyEvent(True)
        self._topic = ""
        self._next_entry_id = 0
        self._produced_size = 0
        self._ledger_started = time.monotonic()
        self._rolling = False
        self._roll_task: asyncio.Task[None] | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        self._rollover_timer: asyncio.TimerHandle | None = None
        infos: Table = ctx.managed_ledger_infos
        cursor_infos: Table = ctx.cursor_infos
        if fence is not None:
            infos = WritesThrough(ctx.managed_ledger_infos, fence)
            cursor_infos = WritesThrough(ctx.cursor_infos, fence)
            fence.watch(self._fence_lost)
        self._info = LedgerInfoWriter(name, infos)
        # Reads, cursors and listeners.
        self._reader = EntryReader(name, ctx.ledgers, ctx.cache, ctx.offloader)
        self._cursors = CursorRegistry(
            name, self, cursor_infos, ctx.config, on_moved=self._cursor_moved
        )
        # Trimming: ids removed from the list (never listed again), the retention source.
        self._trimmed: set[int] = set()
        self.trimmer = LedgerTrimmer(self, ctx)
        self.retention: Callable[[], Retention] | None = None
        """Set by the owner to enable automatic trimming; None: trim only when asked."""
        self.offloads = LedgerOffloads(self, ctx, self.trimmer.lock)
        self._listeners: list[Callable[[], None]] = []
        self._notify_scheduled = False
        self.entries_added = 0
        self.on_write_failure_resolved: Callable[[Position, Position], None] | None = None

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, {self._state}, last={self._last_confirmed})"

    # --- opening --------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        name: str,
        ctx: StorageContext,
        on_closed: Callable[[ManagedLedger], None],
        fence: WriteFence | None = None,
    ) -> ManagedLedger:
        """Recover the stored state (closing a ledger left open by a crash at its true
        end) and start a fresh ledger for appends."""
        ledger = cls(name, ctx, on_closed, fence)
        await ledger._initialize()
        return ledger

    async def _initialize(self) -> None:
        opened = await open_ledger_list(self.name, self._ctx, self._info, self.trimmer)
        self._properties = opened.properties
        self._ledgers = LedgerList(opened.ledgers)
        self._last_confirmed = self._ledgers.last_confirmed()
        self._start_ledger(self._ledgers.last_id)
        if opened.dropped:
            await self._ctx.deleter.after_metadata(
                [LedgerToDelete(self.name, ledger_id) for ledger_id in opened.dropped]
            )
        self.offloads.on_open()

    def _start_ledger(self, ledger_id: int) -> None:
        self._topic = self._ctx.ledgers.topic(ledger_id)
        self._next_entry_id = 0
        self._produced_size = 0
        self._ledger_started = time.monotonic()
        self._arm_rollover_timer()

    # --- trimming -------------------------------------------------------------------
    def _cursor_moved(self) -> None:
        if self.retention is not None and self.is_writable_state():
            self.trimmer.trim_soon()

    # --- appending ------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def closing(self) -> bool:
        """Closing or closed: it takes no more clients (a reopen waits for ``closed()``)."""
        return self._closing or self._state == CLOSED

    async def closed(self) -> None:
        """Until the close under way has finished (its end recorded, cursors stored)."""
        await self._closed.wait()

    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        """Queue ``data``; the future gives its position once Kafka acknowledged it."""
        future: asyncio.Future[Position] = self._loop.create_future()
        if self._state != OPEN or self._closing:
            future.set_exception(self._not_writable())
            return future
        op = _Append(self, data, timestamp_ms if timestamp_ms > 0 else now_ms(), future)
        if self._rolling or self._queued:
            self._queued.append(op)
        elif self._rollover_due():
            self._queued.append(op)
            self._begin_rollover()
        else:
            self._send(op)
        return future

    def _not_writable(self) -> Exception:
        if self._state == FENCED:
            return LedgerFencedError(
                f"managed ledger {self.name} is recovering from a failed write"
            )
        if self._close_error is not None:
            return self._close_error
        return ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    def _send(self, op: _Append) -> None:
        op.ledger_id = self._ledgers.last_id
        op.entry_id = self._next_entry_id
        size = self._produced_size + len(op.data)
        try:
            self._ctx.producer.produce(
                self._topic,
                op.data,
                op,
                key=formats.encode_entry_key(size),
                timestamp_ms=op.timestamp_ms,
            )
        except StorageError as exc:
            # It precedes every queued append: it must fail before them, in call order.
            self._queued.appendleft(op)
            self._fence(exc, culprit=op)
            return
        self._next_entry_id += 1
        self._produced_size = size
        self._inflight.append(op)
        self._unreported += 1
        self._drained.clear()

    def _on_delivered(self, op: _Append, error: KafkaError | None, offset: int) -> None:
        self._unreported -= 1
        if self._unreported == 0:
            self._drained.set()
        if op.settled:
            return
        op.reported = True
        if error is not None:
            op.error = storage_error(f"append to {self.name}", error)
        elif offset != op.entry_id + FIRST_ENTRY_OFFSET:
            op.error = StorageError(
                f"append to {self.name}: entry {op.ledger_id}:{op.entry_id} was stored at "
                f"offset {offset}, expected {op.entry_id + FIRST_ENTRY_OFFSET}"
            )
        elif self.fence is None:
            op.confirmed = True
        else:
            self._awaiting_commit.append(op)
            if len(self._awaiting_commit) == 1:
                self._loop.call_soon(self._request_commit)
        self._settle()

    # --- write fence ------------------------------------------------------------------
    def _request_commit(self) -> None:
        """Ask the fence for a commit covering every append Kafka acknowledged so far."""
        ops, self._awaiting_commit = self._awaiting_commit, []
        if not ops or self.fence is None:
            return
        self.fence.confirm().add_done_callback(lambda done: self._committed(ops, done))

    def _committed(self, ops: list[_Append], done: asyncio.Future[None]) -> None:
        error = done.exception() if not done.cancelled() else StorageError("commit cancelled")
        if error is None:
            for op in ops:
                op.confirmed = True
            self._settle()
            return
        if isinstance(error, OwnershipLostError):
            self._fence_lost(error)
            return
        # The commit failed without a takeover: like a failed write, nothing is guessed.
        culprit = next((op for op in ops if not op.settled), None)
        if culprit is not None:
            self._fence(error, culprit=culprit)

    def _fence_lost(self, error: BaseException) -> None:
        """Another broker took the slot: stop at once, write nothing more."""
        if self._state == CLOSED or self._close_error is not None:
            return
        lost = (
            error
            if isinstance(error, OwnershipLostError)
            else OwnershipLostError(f"{self.name}: {error}")
        )
        self._close_error = lost
        self._loop.create_task(self._shutdown(lost))

    def _settle(self) -> None:
        """Resolve acknowledged appends from the head of the queue, in call order."""
        confirmed = False
        while self._inflight and self._inflight[0].reported:
            op = self._inflight[0]
            if op.error is None and not op.confirmed:
                break
            if op.error is not None:
                self._fence(op.error, culprit=op)
                return
            self._inflight.popleft()
            op.settled = True
            position = Position(op.ledger_id, op.entry_id)
            self._ledgers.add_confirmed(len(op.data))
            self._last_confirmed = position
            self.entries_added += 1
            self._ctx.cache.put(Entry(position, op.data, op.timestamp_ms))
            if not op.future.done():
                op.future.set_result(position)
            confirmed = True
        if confirmed:
            self._schedule_notify()
        if self._rolling and not self._inflight and self._roll_task is None and not self._closing:
            self._roll_task = self._loop.create_task(self._roll())

    # --- failures -------------------------------------------------------------------
    def _fence(self, error: BaseException, culprit: _Append | None = None) -> None:
        """Stop writing: fail every pending append (in call order; ``culprit``, the append
        that failed, with its own error) and find out what Kafka really has."""
        for op in (*self._inflight, *self._queued):
            op.settled = True
            if not op.future.done():
                op.future.set_exception(
                    error
                    if op is culprit
                    else LedgerFencedError(
                        f"managed ledger {self.name} fenced after a failed write: {error}"
                    )
                )
        self._inflight.clear()
        self._queued.clear()
        self._rolling = False
        if self._state != OPEN:
            return
        told = self._last_confirmed
        self._state = FENCED
        self._writable.clear()
        self._cancel_rollover_timer()
        log.warning("%s fenced after a failed write: %s", self.name, error)
        if not self._closing:
            self._recovery_task = self._loop.create_task(self._recover(told))

    # --- closing --------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._state == CLOSED:
            raise self._not_writable()
        if self._closing:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closing")

    def _check_readable(self) -> None:
        if self._state == CLOSED:
            raise self._not_writable()

    async def close(self) -> None:
        """Stop accepting appends, let pending ones settle, record the current ledger as
        closed and store every cursor's latest state."""
        if self._state == CLOSED or self._closing:
            return
        self._closing = True
        self._rolling = False
        self._cancel_rollover_timer()
        await self.trimmer.cancel()
        await self.offloads.cancel()
        for op in self._queued:
            op.settled = True
            op.future.set_exception(ManagedLedgerClosedError(f"managed ledger {self.name} closed"))
        self._queued.clear()
        for task in (self._recovery_task, self._roll_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._recovery_task = self._roll_task = None
        timeout = self._ctx.config.kafka_delivery_timeout_ms / 1000 + 5
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            log.warning("%s: appends still unacknowledged at close", self.name)
        await self._wait_committed(timeout)
        if self._state == OPEN and self._ledgers.current is not None:
            async with self._list_lock:
                closed = LedgerInfo(
                    self._ledgers.last_id,
                    self._ledgers.current_entries,
                    self._ledgers.current_size,
                    now_ms(),
                )
                try:
                    await self._write_info([*self._ledgers.infos()[:-1], closed])
                    self._ledgers.close_current(closed.entries, closed.size, closed.timestamp_ms)
                except Exception as exc:
                    log.warning(
                        "%s: recording the closed ledger failed (recovered on open): %s",
                        self.name,
                        exc,
                    )
        for cursor_name, error in await self._cursors.close_all():
            log.warning("%s: storing cursor %s failed: %s", self.name, cursor_name, error)
        self._finish_close()

    async def _wait_committed(self, timeout: float) -> None:
        """With a write fence: until every acknowledged append is committed (or failed),
        so that the ledger is closed at the end its clients were told."""
        deadline = time.monotonic() + timeout
        while self._inflight and self._state == OPEN and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def _shutdown(self, error: Exception) -> None:
        """Another broker took over: stop at once, write nothing more."""
        log.error("%s: %s; closing without writing", self.name, error)
        self._close_error = error
        self._closing = True
        for op in (*self._inflight, *self._queued):
            op.settled = True
            if not op.future.done():
                op.future.set_exception(error)
        self._fence(error)
        self._cancel_rollover_timer()
        self._cursors.write_error = error
        await self._cursors.discard_all()
        self._finish_close()

    def _finish_close(self) -> None:
        self._state = CLOSED
        self._writable.set()
        self._on_closed(self)
        self._closed.set()
