"""The storage the broker domain uses, in memory: for fast tests without Kafka.

``MemoryStorage`` stands in for ``StorageService`` and ``MemoryLedger`` for
``ManagedLedger``, limited to what topics, subscriptions and deduplication call. What
Kafka does is modelled here; everything above it is the real code: position arithmetic
is ``LedgerList``, cursors are ``ManagedCursor`` opened and stored by ``CursorRegistry``
in an in-memory cursor table. The real contracts hold:

- ``append`` returns a future resolved on the loop, in call order, once "Kafka"
  acknowledged the write. Tests may hold appends back (``hold_appends``) and acknowledge
  or fail each one (``pending_appends``) in any order, as delivery reports would.
- A failed append fences the ledger: it and every later append fail, then the ledger is
  closed at the end "Kafka" really holds, a new ledger opens, and
  ``on_write_failure_resolved(told, truth)`` reports what landed.
- The current ledger rolls over by the configured rollover rules (or ``roll()``).
- A restart (``MemoryStorage.restarted``) sees only what was stored: acknowledged (or
  landed) entries, the cursor states last written, the policies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, cast

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import (
    CursorNotFoundError,
    EntryNotFoundError,
    LedgerFencedError,
    ManagedLedgerClosedError,
    StorageError,
    TopicNotFoundError,
)
from dedup_broker.storage import formats
from dedup_broker.storage.cursor import DEFAULT_MAX_BYTES, ManagedCursor
from dedup_broker.storage.cursor_registry import CursorRegistry
from dedup_broker.storage.deletion import Retention
from dedup_broker.storage.kafka_reader import FetchedRecord
from dedup_broker.storage.ledger_list import LedgerList
from dedup_broker.storage.ledger_store import now_ms
from dedup_broker.storage.position import Entry, EntryVisitor, LedgerInfo, Position
from dedup_broker.storage.rollover import RolloverPolicy
from dedup_broker.storage.status import CLOSED, FENCED, OPEN
from dedup_broker.testing.memory_table import MemoryTable

if TYPE_CHECKING:
    from dedup_broker.storage.service import StorageService

log = logging.getLogger(__name__)

KafkaLedgers = dict[int, list[Entry]]
"""What "Kafka" holds for one managed ledger: ledger id -> its entries, in id order."""


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


class MemoryLedger:
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

    # --- positions ------------------------------------------------------------------
    @property
    def last_confirmed(self) -> Position:
        return self._last_confirmed

    def first_position(self) -> Position:
        return self._ledgers.first_position()

    def next_position(self, p: Position) -> Position:
        return self._ledgers.next_position(p)

    def previous_position(self, p: Position) -> Position:
        return self._ledgers.previous_position(p)

    def normalize_position(self, p: Position) -> Position:
        return self._ledgers.normalize(p)

    def is_valid_position(self, p: Position) -> bool:
        return self._ledgers.exists(p)

    def number_of_entries(self) -> int:
        return self._ledgers.number_of_entries()

    def entries_between(self, start: Position, end: Position) -> int:
        return self._ledgers.entries_between(start, end)

    def ledgers(self) -> list[LedgerInfo]:
        return self._ledgers.infos()

    @property
    def total_size(self) -> int:
        return self._ledgers.total_size()

    # --- reading --------------------------------------------------------------------
    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]:
        """Entries from ``start`` on, never beyond ``last_confirmed``, across ledgers; at
        least one (if any is available) even when larger than ``max_bytes``."""
        self._check_readable()
        self.reads.append((start, max_entries))
        if self.read_gate is not None:
            await self.read_gate.wait()
        await asyncio.sleep(0)  # a read is I/O
        result: list[Entry] = []
        size = 0
        position = self._ledgers.normalize(start)
        while len(result) < max_entries and position <= self._last_confirmed:
            entries = self._kafka.get(position.ledger_id, [])
            if not 0 <= position.entry_id < len(entries):
                raise StorageError(f"{self.name}: entry {position} could not be read")
            entry = entries[position.entry_id]
            if result and size + len(entry.data) > max_bytes:
                break
            result.append(entry)
            size += len(entry.data)
            position = self._ledgers.next_position(position)
        return result

    async def scan_entries(
        self, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Like the real scan (no size bound), recorded in ``reads`` like a read."""
        entries = await self.read_entries(start, max_entries, max_bytes=1 << 62)
        for entry in entries:
            visit(entry.position.ledger_id, entry.position.entry_id, [entry.data])
        return entries[-1].position if entries else None

    async def read_entry(self, position: Position) -> Entry:
        if not self._ledgers.exists(position) or position > self._last_confirmed:
            raise EntryNotFoundError(f"{self.name}: no entry at {position}")
        return (await self.read_entries(position, 1))[0]

    async def find_position_by_time(self, timestamp_ms: int) -> Position:
        """The first entry whose timestamp is >= ``timestamp_ms``, else the position
        after ``last_confirmed``."""
        self._check_readable()
        await asyncio.sleep(0)
        for info in self._ledgers.infos():
            for entry in self._kafka.get(info.ledger_id, [])[: max(info.entries, 0)]:
                if entry.timestamp_ms >= timestamp_ms and entry.position <= self._last_confirmed:
                    return entry.position
        return self._ledgers.next_position(self._last_confirmed)

    def add_entries_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback`` runs (on the loop) whenever ``last_confirmed`` advances."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    def _schedule_notify(self) -> None:
        if not self._notify_scheduled:
            self._notify_scheduled = True
            self._loop.call_soon(self._notify)

    def _notify(self) -> None:
        self._notify_scheduled = False
        for callback in list(self._listeners):
            callback()

    # --- cursors --------------------------------------------------------------------
    async def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        self._check_open()
        return await self._cursors.open(name, initial_position)

    def new_non_durable_cursor(
        self, start: Position | None, inclusive: bool = False, name: str = ""
    ) -> ManagedCursor:
        return self._cursors.new_non_durable(start, inclusive, name)

    async def delete_cursor(self, name: str) -> None:
        await self._cursors.delete(name)
        self._cursor_moved()

    def cursors(self) -> dict[str, ManagedCursor]:
        return self._cursors.opened()

    def cursor_exists(self, name: str) -> bool:
        return self._cursors.exists(name)

    def stored_cursor_names(self) -> list[str]:
        return self._cursors.stored_names()

    def durable_mark_deletes(self) -> list[Position]:
        return self._cursors.durable_mark_deletes()

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


class MemoryCompactedTopics:
    """Companion topics of compacted topics: records in write order, as Kafka keeps them
    before its cleaner runs."""

    def __init__(self) -> None:
        self.topics: dict[str, list[FetchedRecord]] = {}
        self._names = count(1)

    def new_topic_name(self) -> str:
        return f"memory.compacted.{next(self._names)}"

    async def ensure(self, topic: str) -> None:
        self.topics.setdefault(topic, [])

    async def write(self, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
        await asyncio.sleep(0)
        stored = self.topics[topic]
        for key, value in records:
            stored.append(FetchedRecord(len(stored), key, value, 0, ()))

    async def read_all(self, topic: str) -> list[FetchedRecord]:
        await asyncio.sleep(0)
        return list(self.topics.get(topic, []))


class MemoryStorage:
    """``StorageService`` in memory: managed ledgers by name, the cursor and policies
    tables. ``open_failure``, when set, fails every opening of a managed ledger."""

    def __init__(self, config: BrokerConfig | None = None, first_ledger_id: int = 1) -> None:
        self.config = config or BrokerConfig()
        self.policies = MemoryTable()
        self.cursor_infos = MemoryTable()
        self.open_failure: BaseException | None = None
        self._kafka: dict[str, KafkaLedgers] = {}
        self.ledger_properties: dict[str, dict[str, str]] = {}
        """Each managed ledger's stored properties, by name."""
        self._ledger_ids: Iterator[int] = count(first_ledger_id)
        self._open: dict[str, MemoryLedger] = {}
        self._closed = False
        self.compacted_topics = MemoryCompactedTopics()

    def as_service(self) -> StorageService:
        """This object where the code under test expects the real service."""
        return cast("StorageService", self)

    def restarted(self) -> MemoryStorage:
        """The stored data as a fresh broker process sees it: no managed ledger open, no
        state that was only in memory. The previous instance must not be used after."""
        fresh = MemoryStorage(self.config)
        fresh.policies, fresh.cursor_infos = self.policies, self.cursor_infos
        fresh._kafka, fresh._ledger_ids = self._kafka, self._ledger_ids
        fresh.ledger_properties = self.ledger_properties
        fresh.compacted_topics = self.compacted_topics
        return fresh

    def new_ledger_id(self) -> int:
        return next(self._ledger_ids)

    # --- managed ledgers ------------------------------------------------------------
    def ledger(self, name: str) -> MemoryLedger:
        """The open managed ledger ``name``, opened (or created) at once."""
        if self._closed:
            raise StorageError("the storage service is closed")
        ledger = self._open.get(name)
        if ledger is None:
            ledger = MemoryLedger(name, self, self._kafka.setdefault(name, {}))
            self._open[name] = ledger
        return ledger

    async def open_managed_ledger(
        self, name: str, create: bool = True, fence: object | None = None
    ) -> MemoryLedger:
        await asyncio.sleep(0)  # reading the metadata tables
        if self.open_failure is not None:
            raise self.open_failure
        if not create and name not in self._kafka:
            raise TopicNotFoundError(f"managed ledger {name} does not exist")
        return self.ledger(name)

    def ledger_closed(self, ledger: MemoryLedger) -> None:
        if self._open.get(ledger.name) is ledger:
            del self._open[ledger.name]

    def managed_ledger_exists(self, name: str) -> bool:
        return name in self._kafka

    def list_managed_ledgers(self) -> list[str]:
        return sorted(self._kafka)

    async def delete_managed_ledger(self, name: str) -> None:
        ledger = self._open.get(name)
        if ledger is not None:
            await ledger.close()
        prefix = formats.cursor_key_prefix(name)
        cursor_keys = [key for key, _ in self.cursor_infos.items(prefix)]
        if name not in self._kafka and not cursor_keys:
            raise TopicNotFoundError(f"managed ledger {name} does not exist")
        for key in cursor_keys:
            await self.cursor_infos.delete(key)
        self._kafka.pop(name, None)

    @property
    def open_managed_ledgers(self) -> dict[str, MemoryLedger]:
        return dict(self._open)

    async def close(self, timeout_seconds: float | None = None) -> None:
        self._closed = True
        for ledger in list(self._open.values()):
            await ledger.close()
