"""A managed ledger over "Kafka" in memory: ``MemoryLedger``, for fast tests without Kafka.

It is the storage layer's own ``ManagedLedgerImpl`` (positions, reads, cursors, closing)
with an in-memory write side and entry source in place of Kafka's; ``MemoryStorage``
(``memory_storage.py``) opens it. The real contracts hold:

- ``append`` returns a future resolved on the loop, in call order, once "Kafka"
  acknowledged the write. Tests may hold appends back (``hold_appends``) and acknowledge
  or fail each one (``pending_appends``) in any order, as delivery reports would.
- A failed append fences the ledger: it and every later append fail, then the ledger is
  closed at the end "Kafka" really holds, a new ledger opens, and
  ``on_write_failure_resolved(told, truth)`` reports what landed.
- The current ledger rolls over by the configured rollover rules (or ``roll()``).

Trimming and offloading are not modelled: requests are counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dedup_broker.errors import (
    CursorNotFoundError,
    LedgerFencedError,
    ManagedLedgerClosedError,
    OffloadNotConfiguredError,
    StorageError,
)
from dedup_broker.storage import formats
from dedup_broker.storage.api import Entry, EntryVisitor, LedgerInfo, Position, Retention
from dedup_broker.storage.ledger.appends import fail_fenced
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.ledger.ledger_store import now_ms
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl, WriterEvents, WriteSide
from dedup_broker.storage.ledger.rollover import RolloverPolicy
from dedup_broker.storage.values import LedgerState, LedgerStatus, LedgerType
from harness.memory_table import MemoryTable

if TYPE_CHECKING:
    from harness.memory_storage import MemoryStorage

log = logging.getLogger(__name__)

KafkaLedgers = dict[int, list[Entry]]
"""What "Kafka" holds for one managed ledger: ledger id -> its entries, in id order."""


@dataclass(eq=False)
class PendingAppend:
    """One append "Kafka" has not answered yet; a test answers it."""

    writes: MemoryWrites
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
            f"append to {self.writes.name}: Kafka did not acknowledge the write"
        )
        self._report(failure, landed)

    def _report(self, error: BaseException | None, landed: bool) -> None:
        if self.settled or self.reported:
            return
        self.reported, self.error, self.landed = True, error, landed
        self.writes.delivery_reported()


class MemoryEntrySource:
    """Entries read from "Kafka" in memory; every read is recorded, and may be held."""

    def __init__(self, name: str, kafka: KafkaLedgers) -> None:
        self._name = name
        self._kafka = kafka
        self.reads: list[tuple[Position, int]] = []
        """Every read: (start, max_entries)."""
        self.read_gate: asyncio.Event | None = None
        """Reads wait until it is set."""

    async def read(
        self, confirmed: ConfirmedLedgers, start: Position, max_entries: int, max_bytes: int
    ) -> list[Entry]:
        ledgers, last = confirmed.ledgers, confirmed.last
        self.reads.append((start, max_entries))
        if self.read_gate is not None:
            await self.read_gate.wait()
        await asyncio.sleep(0)  # a read is I/O
        result: list[Entry] = []
        size = 0
        position = ledgers.normalize(start)
        while len(result) < max_entries and position <= last:
            entries = self._kafka.get(position.ledger_id, [])
            if not 0 <= position.entry_id < len(entries):
                raise StorageError(f"{self._name}: entry {position} could not be read")
            entry = entries[position.entry_id]
            if result and size + len(entry.data) > max_bytes:
                break
            result.append(entry)
            size += len(entry.data)
            position = ledgers.next_position(position)
        return result

    async def scan(
        self, confirmed: ConfirmedLedgers, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Like the real scan (no size bound), recorded in ``reads`` like a read."""
        entries = await self.read(confirmed, start, max_entries, 1 << 62)
        for entry in entries:
            visit(entry.position.ledger_id, entry.position.entry_id, [entry.data])
        return entries[-1].position if entries else None

    async def find_by_time(self, confirmed: ConfirmedLedgers, timestamp_ms: int) -> Position:
        ledgers, last = confirmed.ledgers, confirmed.last
        await asyncio.sleep(0)
        for info in ledgers.infos():
            for entry in self._kafka.get(info.ledger_id, [])[: max(info.entries, 0)]:
                if entry.timestamp_ms >= timestamp_ms and entry.position <= last:
                    return entry.position
        return ledgers.next_position(last)


@dataclass
class MemoryOffloads:
    """Offloading is not modelled: the checks asked for are counted."""

    checks: int = 0
    status: str = "NOT_RUN"
    last_error: str = ""

    def check_soon(self) -> None:
        self.checks += 1

    def trigger(self, before: Position) -> None:
        raise OffloadNotConfiguredError(
            "no offload driver is configured (managedLedgerOffloadDriver)"
        )

    def first_unoffloaded(self) -> Position:
        return Position(-1, -1)

    async def cancel(self) -> None:
        """Nothing runs in the background."""


class MemoryTrimmer:
    """Trimming is not modelled: the requests are counted, nothing is deleted."""

    def __init__(self, ledger: ManagedLedgerImpl, writes: MemoryWrites) -> None:
        self._ledger = ledger
        self._writes = writes
        self.requests = 0

    def trim_soon(self) -> None:
        self.requests += 1

    async def trim(self, retention: Retention | None = None) -> list[int]:
        self.requests += 1
        return []

    def cursor_moved(self) -> None:
        if self._ledger.policies is not None and self._writes.is_writable_state():
            self.trim_soon()

    def status(self, ledger_id: int, ledger_type: LedgerType, uid: str) -> LedgerStatus:
        listed = self._ledger.ledger_info(ledger_id) is not None
        return LedgerStatus.IN_USE if listed else LedgerStatus.DELETABLE

    async def cancel(self) -> None:
        """Nothing runs in the background."""


class MemoryWrites:
    """The write side in memory: "Kafka" is a dict of lists, delivery reports come from
    the loop (or from a test)."""

    def __init__(
        self,
        name: str,
        storage: MemoryStorage,
        kafka: KafkaLedgers,
        confirmed: ConfirmedLedgers,
        events: WriterEvents,
    ) -> None:
        self.name = name
        self._storage = storage
        self._kafka = kafka
        self._confirmed = confirmed
        self._events = events
        self._loop = asyncio.get_running_loop()
        self._rollover = RolloverPolicy.from_config(storage.config)
        self._state = LedgerState.OPEN
        self._closing = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._inflight: deque[PendingAppend] = deque()
        self._ledger_started = self._loop.time()
        self.hold_appends = False
        """New appends wait for a test to answer them (``pending_appends``)."""

    @property
    def state(self) -> LedgerState:
        return self._state

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._storage.ledger_properties.get(self.name, {}))

    async def set_properties(self, properties: dict[str, str]) -> None:
        self._storage.ledger_properties[self.name] = dict(properties)

    def is_writable_state(self) -> bool:
        return self._state == LedgerState.OPEN and not self._closing

    def check_open(self) -> None:
        if self._state == LedgerState.CLOSED or self._closing:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    def check_readable(self) -> None:
        if self._state == LedgerState.CLOSED:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    # --- appending ------------------------------------------------------------------
    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        future: asyncio.Future[Position] = self._loop.create_future()
        if self._state != LedgerState.OPEN or self._closing:
            future.set_exception(self._not_writable())
            return future
        op = PendingAppend(self, data, timestamp_ms if timestamp_ms > 0 else now_ms(), future)
        self._inflight.append(op)
        self._drained.clear()
        if not self.hold_appends:
            self._loop.call_soon(op.acknowledge)
        return future

    async def wait_writable(self) -> None:
        await self._writable.wait()

    @property
    def pending_appends(self) -> list[PendingAppend]:
        """Appends waiting for their delivery report, in call order."""
        return [op for op in self._inflight if not op.reported]

    def add_entry(self, data: bytes, timestamp_ms: int) -> Position:
        """An entry stored at once, as if appended and acknowledged before the test."""
        if self._inflight:
            raise RuntimeError("add_entry would overtake appends in flight")
        position = self._store(data, timestamp_ms if timestamp_ms > 0 else now_ms())
        self._confirmed.notify_soon()
        return position

    def roll(self) -> int:
        """Close the current ledger and open the next one; returns the new ledger's id."""
        current = self._kafka[self._confirmed.ledgers.last_id]
        self._confirmed.close_current(len(current), _size(current), now_ms())
        return self.open_next_ledger()

    def open_next_ledger(self) -> int:
        ledger_id = self._storage.new_ledger_id()
        self._kafka[ledger_id] = []
        self._confirmed.add_open_ledger(ledger_id)
        self._ledger_started = self._loop.time()
        return ledger_id

    def _store(self, data: bytes, timestamp_ms: int) -> Position:
        age_ms = (self._loop.time() - self._ledger_started) * 1000
        ledgers = self._confirmed.ledgers
        if self._rollover.should_rollover(ledgers.current_entries, ledgers.current_size, age_ms):
            self.roll()
        stored = self._kafka[ledgers.last_id]
        position = Position(ledgers.last_id, len(stored))
        stored.append(Entry(position, data, timestamp_ms))
        self._confirmed.confirm(position, len(data))
        return position

    def delivery_reported(self) -> None:
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
            self._confirmed.notify_soon()

    def _not_writable(self) -> Exception:
        if self._state == LedgerState.FENCED:
            return LedgerFencedError(
                f"managed ledger {self.name} is recovering from a failed write"
            )
        return ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    # --- failures -------------------------------------------------------------------
    def _fence(self, error: BaseException, culprit: PendingAppend) -> None:
        """Fail every append in flight (the culprit with its own error), keep what landed
        (from the head on, as Kafka stores in order), then recover on the loop."""
        told = self._confirmed.last
        last_id = self._confirmed.ledgers.last_id
        stored = self._kafka[last_id]
        landing = True
        for op in self._inflight:
            op.settled = True
            landing = landing and op.landed
            if landing:
                stored.append(Entry(Position(last_id, len(stored)), op.data, op.timestamp_ms))
            fail_fenced(op.future, self.name, error, culprit=op is culprit)
        self._inflight.clear()
        self._drained.set()
        self._state = LedgerState.FENCED
        self._writable.clear()
        log.warning("%s fenced after a failed write: %s", self.name, error)
        self._loop.call_soon(self._recover, told)

    def _recover(self, told: Position) -> None:
        if self._state != LedgerState.FENCED or self._closing:
            return
        stored = self._kafka[self._confirmed.ledgers.last_id]
        self._confirmed.close_current(len(stored), _size(stored), now_ms())
        self.open_next_ledger()
        self._state = LedgerState.OPEN
        self._writable.set()
        truth = self._confirmed.last
        if truth != told:
            self._confirmed.notify_soon()
        self._events.resolved(told, truth)

    # --- closing --------------------------------------------------------------------
    def begin_close(self) -> bool:
        if self._state == LedgerState.CLOSED or self._closing:
            return False
        self._closing = True
        return True

    async def finish(self) -> None:
        """Pending appends settle (a test must answer held ones), the current ledger
        closes where "Kafka" ends it."""
        await self._drained.wait()
        if self._state == LedgerState.OPEN:
            current = self._kafka[self._confirmed.ledgers.last_id]
            self._confirmed.close_current(len(current), _size(current), now_ms())

    def stop(self, error: Exception) -> None:
        self._closing = True
        for op in self._inflight:
            op.settled = True
            if not op.future.done():
                op.future.set_exception(error)
        self._inflight.clear()
        self._drained.set()

    def closed(self) -> None:
        self._state = LedgerState.CLOSED
        self._writable.set()


class _MemoryWriteSide:
    writes: MemoryWrites

    def __init__(self, storage: MemoryStorage, kafka: KafkaLedgers, confirmed: ConfirmedLedgers):
        self._storage = storage
        self._kafka = kafka
        self._confirmed = confirmed

    def __call__(self, ledger: ManagedLedgerImpl, events: WriterEvents) -> WriteSide:
        self.writes = MemoryWrites(ledger.name, self._storage, self._kafka, self._confirmed, events)
        return WriteSide(self.writes, MemoryTrimmer(ledger, self.writes), MemoryOffloads())


class MemoryLedger(ManagedLedgerImpl):
    """A managed ledger over "Kafka" in memory (see the module docstring)."""

    trimmer: MemoryTrimmer
    offloads: MemoryOffloads

    def __init__(self, name: str, storage: MemoryStorage, kafka: KafkaLedgers) -> None:
        self._storage = storage
        # A ledger left open (a crash) is closed at its true end, empty ones at the end
        # are dropped, and a fresh ledger takes the appends.
        while kafka and not kafka[max(kafka)]:
            del kafka[max(kafka)]
        infos = [
            LedgerInfo(ledger_id, len(entries), _size(entries), _closed_at(entries))
            for ledger_id, entries in sorted(kafka.items())
        ]
        confirmed = ConfirmedLedgers(name, LedgerList(infos))
        self._entries = MemoryEntrySource(name, kafka)
        side = _MemoryWriteSide(storage, kafka, confirmed)
        super().__init__(
            name,
            confirmed,
            self._entries,
            storage.cursor_infos,
            storage.config,
            side,
            storage.ledger_closed,
        )
        self._writes = side.writes
        self._writes.open_next_ledger()

    # --- test controls --------------------------------------------------------------
    @property
    def hold_appends(self) -> bool:
        """New appends wait for a test to answer them (``pending_appends``)."""
        return self._writes.hold_appends

    @hold_appends.setter
    def hold_appends(self, hold: bool) -> None:
        self._writes.hold_appends = hold

    @property
    def pending_appends(self) -> list[PendingAppend]:
        """Appends waiting for their delivery report, in call order."""
        return self._writes.pending_appends

    def acknowledge_appends(self) -> None:
        """Every pending append is acknowledged (in call order)."""
        for op in self.pending_appends:
            op.acknowledge()

    def add_entry(self, data: bytes, timestamp_ms: int = 0) -> Position:
        """An entry stored at once, as if appended and acknowledged before the test."""
        return self._writes.add_entry(data, timestamp_ms)

    def roll(self) -> int:
        """Close the current ledger and open the next one; returns the new ledger's id."""
        return self._writes.roll()

    @property
    def reads(self) -> list[tuple[Position, int]]:
        """Every read: (start, max_entries)."""
        return self._entries.reads

    @property
    def read_gate(self) -> asyncio.Event | None:
        """Reads wait until it is set."""
        return self._entries.read_gate

    @read_gate.setter
    def read_gate(self, gate: asyncio.Event | None) -> None:
        self._entries.read_gate = gate

    # --- what was stored --------------------------------------------------------------
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

    def reopened(self) -> MemoryLedger:
        """This managed ledger as a fresh broker process opens it after a crash."""
        return self._storage.restarted().ledger(self.name)


def _size(entries: list[Entry]) -> int:
    return sum(len(entry.data) for entry in entries)


def _closed_at(entries: list[Entry]) -> int:
    return entries[-1].timestamp_ms if entries else 0
