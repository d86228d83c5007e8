"""The append path of a managed ledger on Kafka: call order is storage order.

``append`` hands the record to the shared producer at once. Delivery reports come back in
batches; futures resolve strictly in call order, each after Kafka acknowledged its record
(``acks=all``) at the expected offset and, with a write fence, after the fence proved
(a fence record acknowledged in its open transaction, or a commit) that it still held
the slot after that acknowledgement.

Failure rule: after a failed, timed-out or misplaced write nothing is guessed. The
pipeline is "Fenced": every in-flight and new append fails, and :class:`WriteRecovery`
(``recovery.py``) finds out what Kafka really holds before appends are taken again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaError

from dedup_broker.errors import (
    LedgerFencedError,
    ManagedLedgerClosedError,
    OwnershipLostError,
    StorageError,
)
from dedup_broker.lazy import LazyDeque, LazyEvent
from dedup_broker.storage import formats
from dedup_broker.storage.api import WriteFence
from dedup_broker.storage.kafka.common import storage_error
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.context import StorageContext
from dedup_broker.storage.ledger.ledger_store import FIRST_ENTRY_OFFSET, now_ms
from dedup_broker.storage.values import Entry, LedgerState, Position

log = logging.getLogger(__name__)


def fail_fenced(
    future: asyncio.Future[Position], name: str, error: BaseException, culprit: bool
) -> None:
    """An append pending when its managed ledger fenced fails: the one whose write
    failed with its own error, every other one with ``LedgerFencedError``."""
    if not future.done():
        future.set_exception(
            error
            if culprit
            else LedgerFencedError(f"managed ledger {name} fenced after a failed write: {error}")
        )


class WriteEvents(Protocol):
    """What the write side tells its managed ledger (one object shared by the pipeline,
    the rollover and the recovery: no bound method per topic and part)."""

    async def lost(self, error: Exception) -> None:
        """Another broker took over: close at once, writing nothing more."""

    def resolved(self, told: Position, stored: Position) -> None:
        """Writable again after a failed write: clients heard of ``told``, Kafka holds up
        to ``stored``."""

    def rolled(self) -> None:
        """A new ledger takes the appends: trimming and offloading look again."""


class Rollover(Protocol):
    """What the pipeline asks of the rollover (``rolling.py``)."""

    rolling: bool

    def due(self) -> bool: ...
    def begin(self, create_next: bool = True) -> None: ...
    def started(self) -> None: ...
    def drained(self) -> None: ...
    def cancel_timer(self) -> None: ...


class Recovery(Protocol):
    """Finds out what Kafka holds after a failed write (``recovery.py``)."""

    def start(self, told: Position) -> None: ...


@dataclass(slots=True, eq=False)
class _Append:
    """One append between the call and its settlement."""

    pipeline: AppendPipeline
    data: bytes
    timestamp_ms: int
    future: asyncio.Future[Position]
    ledger_id: int = -1
    entry_id: int = -1
    reported: bool = False
    confirmed: bool = False
    """Acknowledged by Kafka and, with a write fence, by a proof produced after that."""
    settled: bool = False
    error: BaseException | None = None

    def on_delivery(self, error: KafkaError | None, offset: int) -> None:
        self.pipeline.delivered(self, error, offset)


class AppendPipeline:
    """Appends in flight and queued, their settlement, and the writable state."""

    __slots__ = (
        "_awaiting_commit",
        "_confirmed",
        "_ctx",
        "_drained_at",
        "_events",
        "_fence",
        "_idle_timer",
        "_loop",
        "_topic",
        "_unreported",
        "close_error",
        "closing",
        "drained",
        "inflight",
        "name",
        "next_entry_id",
        "produced_size",
        "queued",
        "recovery",
        "rollover",
        "state",
        "writable",
    )

    def __init__(
        self,
        name: str,
        ctx: StorageContext,
        confirmed: ConfirmedLedgers,
        fence: WriteFence | None,
        events: WriteEvents,
    ) -> None:
        self.name = name
        self._ctx = ctx
        self._confirmed = confirmed
        self._fence = fence
        self._events = events
        self._loop = asyncio.get_running_loop()
        self.state = LedgerState.OPEN
        self.closing = False
        self.close_error: Exception | None = None
        self.inflight: LazyDeque[_Append] = LazyDeque()
        self.queued: LazyDeque[_Append] = LazyDeque()
        self._unreported = 0
        self.drained = LazyEvent(True)
        """Set while no delivery report is outstanding."""
        self.writable = LazyEvent(True)
        self._awaiting_commit: list[_Append] = []
        self._topic = ""
        self._drained_at = 0.0
        """When the last append in flight was reported (or the ledger started)."""
        self._idle_timer: asyncio.TimerHandle | None = None
        self.next_entry_id = 0
        self.produced_size = 0
        """Entries and bytes handed to Kafka in the current ledger."""
        self.rollover: Rollover
        self.recovery: Recovery
        """Set by the managed ledger that composes them."""
        if fence is not None:
            fence.watch(self)

    def start_ledger(self, ledger_id: int, entries: int = 0, size: int = 0) -> None:
        """Appends go to ``ledger_id`` from now on (the list names it already), after the
        ``entries`` entries (``size`` bytes) it holds."""
        topic = self._ctx.ledgers.topic(ledger_id)
        if self._topic and self._topic != topic:
            self._ctx.producer.forget(self._topic)
        self._topic = topic
        self.next_entry_id = entries
        self.produced_size = size
        self.rollover.started()
        self._drained_at = self._loop.time()
        self._watch_idle()

    def no_ledger(self) -> None:
        """The current ledger closed and none follows yet: the next append creates one."""
        self._stop_watching_idle()
        if self._topic:
            self._ctx.producer.forget(self._topic)
        self._topic = ""
        self.next_entry_id = 0
        self.produced_size = 0

    def idle_ms(self) -> float:
        """How long nothing was in flight or queued (0 while something is)."""
        if self._unreported or self.inflight or self.queued:
            return 0.0
        return (self._loop.time() - self._drained_at) * 1000

    # --- appending ------------------------------------------------------------------
    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        future: asyncio.Future[Position] = self._loop.create_future()
        if self.state != LedgerState.OPEN or self.closing:
            future.set_exception(self.not_writable())
            return future
        op = _Append(self, data, timestamp_ms if timestamp_ms > 0 else now_ms(), future)
        if self.rollover.rolling or self.queued:
            self.queued.append(op)
        elif self.rollover.due():
            self.queued.append(op)
            self.rollover.begin()
        else:
            self._send(op)
        return future

    def send_queued(self) -> None:
        """After a rollover: what queued meanwhile goes out, in call order."""
        while self.queued and self.state == LedgerState.OPEN and not self.rollover.rolling:
            if self.rollover.due():
                self.rollover.begin()
                break
            self._send(self.queued.popleft())

    def not_writable(self) -> Exception:
        if self.state == LedgerState.FENCED:
            return LedgerFencedError(
                f"managed ledger {self.name} is recovering from a failed write"
            )
        if self.close_error is not None:
            return self.close_error
        return ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    def is_writable_state(self) -> bool:
        return self.state == LedgerState.OPEN and not self.closing

    def _send(self, op: _Append) -> None:
        op.ledger_id = self._confirmed.ledgers.last_id
        op.entry_id = self.next_entry_id
        size = self.produced_size + len(op.data)
        try:
            self._ctx.producer.produce(
                self._topic,
                op.data,
                op,
                key=formats.encode_entry_key(size, op.entry_id),
                timestamp_ms=op.timestamp_ms,
                single_partition=True,
            )
        except StorageError as exc:
            # It precedes every queued append: it must fail before them, in call order.
            self.queued.appendleft(op)
            self.fence(exc, culprit=op)
            return
        self.next_entry_id += 1
        self.produced_size = size
        self.inflight.append(op)
        self._unreported += 1
        self.drained.clear()

    # --- idle ledgers --------------------------------------------------------------------
    def _watch_idle(self) -> None:
        """Nothing in flight: once that stayed so for ``kafkaProducerIdleTopicSeconds``,
        the producer may forget the ledger's topic (the next append learns it again)."""
        idle_s = self._ctx.config.kafka_producer_idle_topic_seconds
        if self._idle_timer is None and idle_s > 0 and self._topic:
            delay = self._drained_at + idle_s - self._loop.time()
            self._idle_timer = self._loop.call_later(max(delay, 0.0), self._idle_check)

    def _idle_check(self) -> None:
        self._idle_timer = None
        if self._unreported or self.state == LedgerState.CLOSED:
            return  # the next drain looks again
        idle_s = self._ctx.config.kafka_producer_idle_topic_seconds
        if self._loop.time() - self._drained_at >= idle_s:
            self._ctx.producer.forget(self._topic)
            self._ctx.cache.drop_recent(self._confirmed.ledgers.last_id, self.next_entry_id)
        else:
            self._watch_idle()

    def _stop_watching_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def delivered(self, op: _Append, error: KafkaError | None, offset: int) -> None:
        """Kafka's delivery report of ``op``."""
        self._unreported -= 1
        if self._unreported == 0:
            self.drained.set()
            self._drained_at = self._loop.time()
            self._watch_idle()
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
        elif self._fence is None:
            op.confirmed = True
        else:
            self._awaiting_commit.append(op)
            if len(self._awaiting_commit) == 1:
                self._loop.call_soon(self._request_commit)
        self._settle()

    # --- write fence ------------------------------------------------------------------
    def _request_commit(self) -> None:
        """Ask the fence for a proof covering every append Kafka acknowledged so far."""
        ops, self._awaiting_commit = self._awaiting_commit, []
        if not ops or self._fence is None:
            return
        self._fence.confirm().add_done_callback(lambda done: self._committed(ops, done))

    def _committed(self, ops: list[_Append], done: asyncio.Future[None]) -> None:
        error = done.exception() if not done.cancelled() else StorageError("commit cancelled")
        if error is None:
            for op in ops:
                op.confirmed = True
            self._settle()
            return
        if isinstance(error, OwnershipLostError):
            self.fence_lost(error)
            return
        # The proof failed without a takeover: like a failed write, nothing is guessed.
        culprit = next((op for op in ops if not op.settled), None)
        if culprit is not None:
            self.fence(error, culprit=culprit)

    def fence_lost(self, error: BaseException) -> None:
        """Another broker took the slot: stop at once, write nothing more."""
        if self.state == LedgerState.CLOSED or self.close_error is not None:
            return
        lost = (
            error
            if isinstance(error, OwnershipLostError)
            else OwnershipLostError(f"{self.name}: {error}")
        )
        self.close_error = lost
        self._loop.create_task(self._events.lost(lost))

    async def wait_committed(self, timeout: float) -> None:
        """With a write fence: until every acknowledged append is committed (or failed),
        so that the ledger is closed at the end its clients were told."""
        deadline = time.monotonic() + timeout
        while self.inflight and self.state == LedgerState.OPEN and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def _settle(self) -> None:
        """Resolve acknowledged appends from the head of the queue, in call order."""
        confirmed = False
        while self.inflight and self.inflight[0].reported:
            op = self.inflight[0]
            if op.error is None and not op.confirmed:
                break
            if op.error is not None:
                self.fence(op.error, culprit=op)
                return
            self.inflight.popleft()
            op.settled = True
            position = Position(op.ledger_id, op.entry_id)
            self._confirmed.confirm(position, len(op.data))
            self._ctx.cache.put(Entry(position, op.data, op.timestamp_ms))
            if not op.future.done():
                op.future.set_result(position)
            confirmed = True
        if confirmed:
            self._confirmed.notify_soon()
        if not self.inflight and not self.closing:
            self.rollover.drained()

    # --- failures -------------------------------------------------------------------
    def fence(self, error: BaseException, culprit: _Append | None = None) -> None:
        """Stop writing: fail every pending append (in call order; ``culprit``, the append
        that failed, with its own error) and find out what Kafka really has."""
        for op in (*self.inflight, *self.queued):
            op.settled = True
            fail_fenced(op.future, self.name, error, culprit=op is culprit)
        self.inflight.clear()
        self.queued.clear()
        self.rollover.rolling = False
        if self.state != LedgerState.OPEN:
            return
        told = self._confirmed.last
        self.state = LedgerState.FENCED
        self.writable.clear()
        self.rollover.cancel_timer()
        log.warning("%s fenced after a failed write: %s", self.name, error)
        if not self.closing:
            self.recovery.start(told)

    def reopen(self) -> None:
        """Recovered: appends are taken again."""
        self.state = LedgerState.OPEN
        self.writable.set()

    def fail_queued(self) -> None:
        """Closing: appends not sent yet fail."""
        for op in self.queued:
            op.settled = True
            op.future.set_exception(ManagedLedgerClosedError(f"managed ledger {self.name} closed"))
        self.queued.clear()

    def stop(self, error: Exception) -> None:
        """Another broker took over: every pending append fails with ``error``."""
        self.close_error = error
        self.closing = True
        for op in (*self.inflight, *self.queued):
            op.settled = True
            if not op.future.done():
                op.future.set_exception(error)
        self.fence(error)
        self.rollover.cancel_timer()

    def closed(self) -> None:
        self._stop_watching_idle()
        if self._fence is not None:
            self._fence.unwatch(self)
        if self._topic:
            self._ctx.producer.forget(self._topic)
        self.state = LedgerState.CLOSED
        self.writable.set()
