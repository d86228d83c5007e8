"""A managed ledger: one topic's ordered list of ledgers, composed of collaborators.

``ManagedLedgerImpl`` answers positions and reads from what is confirmed
(``confirmed.py``) through an entry source (``entry_reader.py``: the cache, Kafka, tiered
storage), holds the cursors (``cursor/registry.py``), and leaves everything that writes
to its write side:

- on Kafka (``kafka_ledger.py``): the append pipeline (``appends.py``), rollovers
  (``rollover.py``), the recovery after a failed write (``recovery.py``) and the stored
  ledger list (``list_store.py``), with trimming (``trimmer.py``) and offloading to
  tiered storage (``offloads.py``);
- in memory, for unit tests: the harness's own write side, the same read side.

Opening (the stored list after a crash) is ``opening.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import EntryNotFoundError
from dedup_broker.lazy import LazyEvent
from dedup_broker.storage.api import LedgerOffloads, LedgerPolicies, MetadataTable, WriteFence
from dedup_broker.storage.cursor.registry import CursorRegistry
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.values import (
    DEFAULT_MAX_BYTES,
    Entry,
    EntryVisitor,
    LedgerInfo,
    LedgerState,
    LedgerStatus,
    LedgerType,
    Position,
    Retention,
)

log = logging.getLogger(__name__)


class EntrySource(Protocol):
    """Where entries are read from (the real one: cache, Kafka, tiered storage), never
    beyond what is confirmed."""

    async def read(
        self, confirmed: ConfirmedLedgers, start: Position, max_entries: int, max_bytes: int
    ) -> list[Entry]: ...

    async def scan(
        self, confirmed: ConfirmedLedgers, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None: ...

    async def find_by_time(self, confirmed: ConfirmedLedgers, timestamp_ms: int) -> Position: ...


class LedgerWriter(Protocol):
    """Everything of a managed ledger that writes: appends and the stored list."""

    @property
    def state(self) -> LedgerState: ...

    @property
    def properties(self) -> dict[str, str]: ...

    def is_writable_state(self) -> bool:
        """Open and not closing: appends are taken, trims and offloads may run."""
        ...

    def check_open(self) -> None:
        """Raises unless the managed ledger is open (or fenced) and not closing."""

    def check_readable(self) -> None:
        """Raises once the managed ledger is closed."""

    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]: ...

    async def wait_writable(self) -> None: ...

    async def set_properties(self, properties: dict[str, str]) -> None: ...

    def begin_close(self) -> bool:
        """Stop taking appends; False if closing or closed already."""
        ...

    async def finish(self) -> None:
        """Let pending appends settle and record the current ledger as closed."""

    def stop(self, error: Exception) -> None:
        """Another broker took over: fail everything pending, write nothing more."""

    def closed(self) -> None: ...


class Trimming(Protocol):
    def trim_soon(self) -> None: ...

    async def trim(self, retention: Retention | None = None) -> list[int]: ...

    def cursor_moved(self) -> None: ...

    def status(self, ledger_id: int, ledger_type: LedgerType, uid: str) -> LedgerStatus: ...

    async def cancel(self) -> None: ...


class Offloading(LedgerOffloads, Protocol):
    async def cancel(self) -> None: ...


@dataclass(frozen=True, slots=True)
class WriteSide:
    writer: LedgerWriter
    trimmer: Trimming
    offloads: Offloading


class WriterEvents:
    """What the write side tells its managed ledger."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: ManagedLedgerImpl) -> None:
        self._ledger = ledger

    async def lost(self, error: Exception) -> None:
        """Another broker took over: close at once, writing nothing more."""
        await self._ledger.close_without_writing(error)

    def resolved(self, told: Position, stored: Position) -> None:
        """Writable again after a failed write: clients heard of ``told``, Kafka holds up
        to ``stored``."""
        callback = self._ledger.on_write_failure_resolved
        if callback is not None:
            callback(told, stored)

    def rolled(self) -> None:
        """A new ledger takes the appends: trimming and offloading look again."""
        ledger = self._ledger
        if ledger.policies is not None:
            ledger.trimmer.trim_soon()
        ledger.offloads.check_soon()


WriteSideFactory = Callable[["ManagedLedgerImpl", WriterEvents], WriteSide]


class ManagedLedgerImpl:
    """The storage layer's ``api.ManagedLedger``."""

    __slots__ = (
        "_closed",
        "_closing",
        "_confirmed",
        "_on_closed",
        "_source",
        "_writer",
        "cursors",
        "fence",
        "name",
        "offloads",
        "on_write_failure_resolved",
        "policies",
        "read_limit",
        "trimmer",
    )

    def __init__(
        self,
        name: str,
        confirmed: ConfirmedLedgers,
        source: EntrySource,
        cursor_table: MetadataTable,
        config: BrokerConfig,
        write_side: WriteSideFactory,
        on_closed: Callable[[ManagedLedgerImpl], None],
        fence: WriteFence | None = None,
    ) -> None:
        self.name = name
        self.fence = fence
        """The slot's write fence (a cluster); ``None``: acknowledged as Kafka acknowledges."""
        self._confirmed = confirmed
        self._source = source
        self._on_closed = on_closed
        self._closing = False
        self._closed = LazyEvent(False)
        self.policies: LedgerPolicies | None = None
        """Set by the owner to trim and offload automatically; None: only when asked."""
        self.on_write_failure_resolved: Callable[[Position, Position], None] | None = None
        self.read_limit: Position | None = None
        """Set by the owner: cursors read no entry after it (Pulsar's max read position)."""
        side = write_side(self, WriterEvents(self))
        self._writer = side.writer
        self.trimmer = side.trimmer
        self.offloads = side.offloads
        self.cursors = CursorRegistry(
            name,
            self,
            cursor_table,
            config,
            moves=self.trimmer,
            guard=self._writer,
        )

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, {self.state}, last={self.last_confirmed})"

    # --- writing --------------------------------------------------------------------
    @property
    def state(self) -> LedgerState:
        return self._writer.state

    @property
    def entries_added(self) -> int:
        return self._confirmed.entries_added

    @property
    def properties(self) -> dict[str, str]:
        return self._writer.properties

    async def set_properties(self, properties: dict[str, str]) -> None:
        """Replace the managed ledger's properties (stored with its ledger list)."""
        self._writer.check_open()
        await self._writer.set_properties(properties)

    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        """Queue ``data``; the future gives its position once Kafka acknowledged it."""
        return self._writer.append(data, timestamp_ms)

    async def wait_writable(self) -> None:
        """Return once the managed ledger is not Fenced."""
        await self._writer.wait_writable()

    @property
    def closing(self) -> bool:
        """Closing or closed: it takes no more clients (a reopen waits for ``closed()``)."""
        return self._closing

    async def closed(self) -> None:
        """Until the close under way has finished (its end recorded, cursors stored)."""
        await self._closed.wait()

    async def close(self) -> None:
        """Stop accepting appends, let pending ones settle, record the current ledger as
        closed and store every cursor's latest state."""
        if not self._writer.begin_close():
            return
        self._closing = True
        await self.trimmer.cancel()
        await self.offloads.cancel()
        await self._writer.finish()
        for cursor_name, error in await self.cursors.close_all():
            log.warning("%s: storing cursor %s failed: %s", self.name, cursor_name, error)
        self._finish_close()

    async def close_without_writing(self, error: Exception) -> None:
        """Another broker took over: stop at once, write nothing more."""
        if self._closed.is_set():
            return
        log.error("%s: %s; closing without writing", self.name, error)
        self._closing = True
        self._writer.stop(error)
        self.cursors.write_error = error
        await self.cursors.discard_all()
        self._finish_close()

    def _finish_close(self) -> None:
        self._writer.closed()
        self._on_closed(self)
        self._closed.set()

    # --- positions ------------------------------------------------------------------
    @property
    def last_confirmed(self) -> Position:
        return self._confirmed.last

    def first_position(self) -> Position:
        return self._confirmed.ledgers.first_position()

    def next_position(self, p: Position) -> Position:
        return self._confirmed.ledgers.next_position(p)

    def previous_position(self, p: Position) -> Position:
        return self._confirmed.ledgers.previous_position(p)

    def normalize_position(self, p: Position) -> Position:
        """The first position at or after ``p`` that exists or will be written next."""
        return self._confirmed.ledgers.normalize(p)

    def is_valid_position(self, p: Position) -> bool:
        """True if an entry exists at ``p``."""
        return self._confirmed.ledgers.exists(p)

    def number_of_entries(self) -> int:
        return self._confirmed.ledgers.number_of_entries()

    def entries_between(self, start: Position, end: Position) -> int:
        return self._confirmed.ledgers.entries_between(start, end)

    def ledgers(self) -> list[LedgerInfo]:
        return self._confirmed.ledgers.infos()

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        return next((i for i in self.ledgers() if i.ledger_id == ledger_id), None)

    @property
    def total_size(self) -> int:
        return self._confirmed.ledgers.total_size()

    # --- reading --------------------------------------------------------------------
    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]:
        """Entries from ``start`` on, never beyond ``last_confirmed``, across ledgers; at
        least one (if any is available) even when larger than ``max_bytes``."""
        self._writer.check_readable()
        return await self._source.read(self._confirmed, start, max_entries, max_bytes)

    async def scan_entries(
        self, start: Position, max_entries: int, visit: EntryVisitor
    ) -> Position | None:
        """Hands the data of entries from ``start`` on (never beyond ``last_confirmed``,
        at most ``max_entries``) to ``visit`` in a worker thread, bypassing the cache;
        returns the last position handed, None if there was none. For replays that fold
        many entries into a little state."""
        self._writer.check_readable()
        return await self._source.scan(self._confirmed, start, max_entries, visit)

    async def read_entry(self, position: Position) -> Entry:
        if not self.is_valid_position(position) or position > self.last_confirmed:
            raise EntryNotFoundError(f"{self.name}: no entry at {position}")
        entries = await self.read_entries(position, 1)
        if not entries or entries[0].position != position:
            raise EntryNotFoundError(f"{self.name}: no entry at {position}")
        return entries[0]

    async def find_position_by_time(self, timestamp_ms: int) -> Position:
        """The first entry whose timestamp is >= ``timestamp_ms``, else the position
        after ``last_confirmed`` (timestamps are assumed not to decrease)."""
        self._writer.check_readable()
        return await self._source.find_by_time(self._confirmed, timestamp_ms)

    def add_entries_listener(self, callback: Callable[[], None]) -> None:
        """``callback`` runs (on the loop) whenever ``last_confirmed`` advances."""
        self._confirmed.listeners.append(callback)

    def remove_entries_listener(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._confirmed.listeners.remove(callback)
