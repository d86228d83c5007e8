"""A managed ledger over "Kafka" in memory: ``MemoryLedger``, for fast tests without Kafka.

It stands in for ``ManagedLedger``, limited to what topics, subscriptions and
deduplication call; ``MemoryStorage`` (``memory_storage.py``) opens it, the read side is
``memory_ledger_view.py``. The real contracts hold:

- ``append`` returns a future resolved on the loop, in call order, once "Kafka"
  acknowledged the write. Tests may hold appends back (``hold_appends``) and acknowledge
  or fail each one (``pending_appends``) in any order, as delivery reports would.
- A failed append fences the ledger: it and every later append fail, then the ledger is
  closed at the end "Kafka" really holds, a new ledger opens, and
  ``on_write_failure_resolved(told, truth)`` reports what landed.
- The current ledger rolls over by the configured rollover rules (or ``roll()``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.errors import (
    CursorNotFoundError,
    LedgerFencedError,
    ManagedLedgerClosedError,
    StorageError,
)
from dedup_broker.storage import formats
from dedup_broker.storage.cursor_registry import CursorRegistry
from dedup_broker.storage.deletion import Retention
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.ledger_store import now_ms
from dedup_broker.storage.position import Entry, LedgerInfo, Position
from dedup_broker.storage.rollover import RolloverPolicy
from dedup_broker.storage.status import CLOSED, FENCED, OPEN
from harness.memory_ledger_view import KafkaLedgers, MemoryLedgerView
from harness.memory_table import MemoryTable

if TYPE_CHECKING:
    from harness.memory_storage import MemoryStorage

log = logging.getLogger(__name__)


@dataclass(eq=False)
class PendingAppend:
    """One append "Kafka" has not answered yet; a test answers it."""

    ledger: MemoryLedger
    data: bytes
    timestamp_ms: int
    future: asyncio.Future[Position]
    reported: bool = False
    landed: bool = False
    """Kafka holds the record (acknowledged, or failed although it was stored)."""
    error: BaseException | None = None
    settled: bool = False

    def acknowledge(self) -> None:
        self._report(None, landed=True)

    def fail(self, error: BaseException | None = None, landed: bool = False) -> None:
        """A failed delivery report; ``landed``: the record was stored nonetheless."""
        failure = error or StorageError(
            f"append to {self.ledger.name}: Kafka did not acknowledge the write"
        )
        self._report(failure, landed)

    def _report(self, error: BaseException | None, landed: bool) -> None:
        if self.settled or self.reported:
            return
        self.reported, self.error, self.landed = True, error, landed
        self.ledger._delivery_reported()


@dataclass
class MemoryOffloads:
    """Offloading is not modelled: the threshold the topic sets, and the checks asked for."""

    threshold: Callable[[], int] | None = None
    threshold_seconds: Callable[[], int] | None = None
    checks: int = 0

    def check_soon(self) -> None:
        self.checks += 1


@dataclass
class MemoryTrimmer:
    """Trimming is not modelled: the requests are counted."""

    requests: int = 0

    def trim_soon(self) -> None:
        self.requests += 1


class MemoryLedger(MemoryLedgerView):
    """A managed ledger over "Kafka" in memory (see the module docstring)."""

    def __init__(self, name: str, storage: MemoryStorage, kafka: KafkaLedgers) -> None:
        self.name = name
        self._storage = storage
        self._kafka = kafka
        self._loop = asyncio.get_running_loop()
        self._rollover = RolloverPolicy.from_config(storage.config)
        self._state = OPEN
        self._closing = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._inflight: deque[PendingAppend] = deque()
        self._listeners: list[Callable[[], None]] = []
        self._notify_scheduled = False
        self._cursors = CursorRegistry(
            name,
            self,
            storage.cursor_infos.as_metadata_table(),
            storage.config,
            on_moved=self._cursor_moved,
        )
        self.entries_added = 0
        self.on_write_failure_resolved: Callable[[Position, Position], None] | None = None
        self.retention: Callable[[], Retention] | None = None
        self.offloads = MemoryOffloads()
        self.trimmer = MemoryTrimmer()
        # Test controls.
        self.hold_appends = False
        """New appends wait for a test to answer them (``pending_appends``)."""
        self.read_gate: asyncio.Event | None = None
        """Reads wait until it is set."""
        self.reads: list[tuple[Position, int]] = []
        """Every read: (start, max_entries)."""
        # A ledger left open (a crash) is closed at its true end, empty ones at the end
        # are dropped, and a fresh ledger takes the appends.
        while kafka and not kafka[max(kafka)]:
            del kafka[max(kafka)]
        infos = [
            LedgerInfo(ledger_id, len(entries), _size(entries), _closed_at(entries))
            for ledger_id, entries in sorted(kafka.items())
        ]
        self._ledgers = LedgerList(infos)
        self._last_confirmed = self._ledgers.last_confirmed()
        self._ledger_started = self._loop.time()
        self._open_next_ledger()

    def __repr__(self) -> str:
        return f"MemoryLedger({self.name!r}, {self._state}, last={self.last_confirmed})"

    # --- appending ------------------------------------------------------------------
    @property
    def properties(self) -> dict[str, str]:
        return dict(self._storage.ledger_properties.get(self.name, {}))

    async def set_properties(self, properties: dict[str, str]) -> None:
        self._storage.ledger_properties[self.name] = dict(properties)

    @property
    def state(self) -> str:
        return self._state

    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        """Queue ``data``; the future gives its position once "Kafka" acknowledged it."""
        future: asyncio.Future[Position] = self._loop.create_future()
        if self._state != OPEN or self._closing:
            future.set_exception(self._not_writable())
            return future
        op = PendingAppend(self, data, timestamp_ms if timestamp_ms > 0 else now_ms(), future)
        self._inflight.append(op)
        self._drained.clear()
        if not self.hold_appends:
            self._loop.call_soon(op.acknowledge)
        return future

    @property
    def pending_appends(self) -> list[PendingAppend]:
        """Appends waiting for their delivery report, in call order."""
        return [op for op in self._inflight if not op.reported]

    def acknowledge_appends(self) -> None:
        """Every pending append is acknowledged (in call order)."""
        for op in self.pending_appends:
            op.acknowledge()

    def add_entry(self, data: bytes, timestamp_ms: int = 0) -> Position:
        """An entry stored at once, as if appended and acknowledged before the test."""
        if self._inflight:
            raise RuntimeError("add_entry would overtake appends in flight")
        position = self._store(data, timestamp_ms if timestamp_ms > 0 else now_ms())
        self._schedule_notify()
        return position

    def roll(self) -> int:
        """Close the current ledger and open the next one; returns the new ledger's id."""
        current = self._kafka[self._ledgers.last_id]
        self._ledgers.close_current(len(current), _size(current), now_ms())
        return self._open_next_ledger()

    def _open_next_ledger(self) -> int:
        ledger_id = self._storage.new_ledger_id()
        self._kafka[ledger_id] = []
        self._ledgers.add_open_ledger(ledger_id)
        self._last_confirmed = self._ledgers.last_confirmed()
        self._ledger_started = self._loop.time()
        return ledger_id

    def _store(self, data: bytes, timestamp_ms: int) -> Position:
        age_ms = (self._loop.time() - self._ledger_started) * 1000
        entries, size = self._ledgers.current_entries, self._ledgers.current_size
        if self._rollover.should_rollover(entries, size, age_ms):
            self.roll()
        ledger_id = self._ledgers.last_id
        stored = self._kafka[ledger_id]
        position = Position(ledger_id, len(stored))
        stored.append(Entry(position, data, timestamp_ms))
        self._ledgers.add_confirmed(len(data))
        self._last_confirmed = position
        self.entries_added += 1
        return position

    def _delivery_reported(self) -> None:
        if not self.pending_appends:
            self._drained.set()
        confirmed = False
        while self._inflight and self._inflight[0].reported:
            op = self._inflight[0]
            if op.error is not None:
                self._fence(op.error, culprit=op)
                return
            self._inflight.popleft()
            op.settled = True
            position = self._store(op.data, op.timestamp_ms)
            if not op.future.done():
                op.future.set_result(position)
            confirmed = True
        if confirmed:
            self._schedule_notify()

    def _not_writable(self) -> Exception:
        if self._state == FENCED:
            return LedgerFencedError(
                f"managed ledger {self.name} is recovering from a failed write"
            )
        return ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    # --- failures -------------------------------------------------------------------
    def _fence(self, error: BaseException, culprit: PendingAppend) -> None:
        """Fail every append in flight (the culprit with its own error), keep what landed
        (from the head on, as Kafka stores in order), then recover on the loop."""
        told = self._last_confirmed
        stored = self._kafka[self._ledgers.last_id]
        landing = True
        for op in self._inflight:
            op.settled = True
            landing = landing and op.landed
            if landing:
                position = Position(self._ledgers.last_id, len(stored))
                stored.append(Entry(position, op.data, op.timestamp_ms))
            if not op.future.done():
                op.future.set_exception(
                    error
                    if op is culprit
                    else LedgerFencedError(
                        f"managed ledger {self.name} fenced after a failed write: {error}"
                    )
                )
        self._inflight.clear()
        self._drained.set()
        self._state = FENCED
        self._writable.clear()
        log.warning("%s fenced after a failed write: %s", self.name, error)
        self._loop.call_soon(self._recover, told)

    def _recover(self, told: Position) -> None:
        if self._state != FENCED or self._closing:
            return
        stored = self._kafka[self._ledgers.last_id]
        self.entries_added += len(stored) - self._ledgers.current_entries
        self._ledgers.close_current(len(stored), _size(stored), now_ms())
        self._open_next_ledger()
        self._state = OPEN
        self._writable.set()
        truth = self._last_confirmed
        if truth != told:
            self._schedule_notify()
        if self.on_write_failure_resolved is not None:
            self.on_write_failure_resolved(told, truth)

    async def wait_writable(self) -> None:
        """Return once the managed ledger is not Fenced."""
        await self._writable.wait()

    # --- cursors --------------------------------------------------------------------
    def _cursor_moved(self) -> None:
        if self.retention is not None and self._state == OPEN and not self._closing:
            self.trimmer.trim_soon()

    def stored_cursor(self, name: str) -> formats.CursorRecord:
        """What the cursor table holds for cursor ``name`` of this ledger."""
        stored = self._storage.cursor_infos.get(formats.cursor_key(self.name, name))
        if stored is None:
            raise CursorNotFoundError(f"no cursor {name!r} stored for {self.name}")
        return formats.decode_cursor_info(stored)

    def cursor_writes(self, name: str) -> list[formats.CursorRecord]:
        """Every state of cursor ``name`` written to the cursor table, oldest first."""
        key = formats.cursor_key(self.name, name)
        table = self._storage.cursor_infos
        return [formats.decode_cursor_info(v) for k, v in table.writes if k == key and v]

    @property
    def cursor_table(self) -> MemoryTable:
        return self._storage.cursor_infos

    # --- closing --------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._state == CLOSED or self._closing:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    def _check_readable(self) -> None:
        if self._state == CLOSED:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    async def close(self) -> None:
        """Stop accepting appends, let pending ones settle (a test must answer held ones),
        close the current ledger and store every cursor's latest state."""
        if self._state == CLOSED or self._closing:
            return
        self._closing = True
        await self._drained.wait()
        if self._state == OPEN:
            current = self._kafka[self._ledgers.last_id]
            self._ledgers.close_current(len(current), _size(current), now_ms())
        for cursor_name, error in await self._cursors.close_all():
            log.warning("%s: storing cursor %s failed: %s", self.name, cursor_name, error)
        self._state = CLOSED
        self._writable.set()
        self._storage.ledger_closed(self)

    def reopened(self) -> MemoryLedger:
        """This managed ledger as a fresh broker process opens it after a crash."""
        return self._storage.restarted().ledger(self.name)


def _size(entries: list[Entry]) -> int:
    return sum(len(entry.data) for entry in entries)


def _closed_at(entries: list[Entry]) -> int:
    return entries[-1].timestamp_ms if entries else 0
