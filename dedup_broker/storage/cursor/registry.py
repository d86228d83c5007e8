"""The cursors of one managed ledger: opening, creating, deleting, and where they are stored.

Durable cursors live in the compacted cursor topic under
``managed ledger name + "\\0" + cursor name``; this registry is their
:class:`~dedup_broker.storage.cursor.cursor.CursorStorage`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import CursorNotFoundError
from dedup_broker.lazy import LazyLock
from dedup_broker.storage import formats
from dedup_broker.storage.api import MetadataTable
from dedup_broker.storage.cursor.cursor import CursorLedger, CursorMoves, ManagedCursorImpl
from dedup_broker.storage.values import Position

INITIAL_POSITIONS = ("latest", "earliest")


class OpenGuard(Protocol):
    def check_open(self) -> None:
        """Raises unless cursors may be opened now (the managed ledger is not closing)."""


class CursorRegistry:
    __slots__ = (
        "_config",
        "_guard",
        "_ledger",
        "_lock",
        "_moves",
        "_name",
        "_open",
        "_table",
        "write_error",
    )

    def __init__(
        self,
        managed_ledger_name: str,
        ledger: CursorLedger,
        table: MetadataTable,
        config: BrokerConfig,
        moves: CursorMoves | None = None,
        guard: OpenGuard | None = None,
    ) -> None:
        self._name = managed_ledger_name
        self._ledger = ledger
        self._table = table
        self._config = config
        self._moves = moves
        self._guard = guard
        self._open: dict[str, ManagedCursorImpl] = {}
        self._lock = LazyLock()
        self.write_error: Exception | None = None
        """Once set (the managed ledger was taken over), every write fails with it."""

    def _key(self, cursor_name: str) -> str:
        return formats.cursor_key(self._name, cursor_name)

    async def open(self, name: str, initial_position: str = "latest") -> ManagedCursorImpl:
        """The durable cursor ``name``: its stored state if it exists, else a new one at
        ``"latest"`` (mark-delete = last_confirmed) or ``"earliest"`` (just before the
        first entry), stored before this returns."""
        if self._guard is not None:
            self._guard.check_open()
        if initial_position not in INITIAL_POSITIONS:
            raise ValueError(f"initial position must be one of {INITIAL_POSITIONS}")
        async with self._lock:
            cursor = self._open.get(name)
            if cursor is not None:
                return cursor
            stored = self._table.get(self._key(name))
            if stored is None:
                await self._table.refresh()
                stored = self._table.get(self._key(name))
            if stored is not None:
                record = formats.decode_cursor_info(stored)
                cursor = self._durable(
                    name,
                    record.mark_delete,
                    individually_deleted=record.individually_deleted,
                    properties=record.properties,
                    batch_acks=record.batch_acks,
                    persisted=True,
                    last_persisted_ms=record.last_active_ms,
                )
            else:
                if initial_position == "latest":
                    start = self._ledger.last_confirmed
                else:
                    start = self._before_first()
                cursor = self._durable(name, start)
                try:
                    await cursor.flush()
                except BaseException:
                    # Never stored: it must not keep retrying and later overwrite the state
                    # of the cursor opened again.
                    await cursor.discard()
                    raise
            self._open[name] = cursor
            return cursor

    def _before_first(self) -> Position:
        first = self._ledger.normalize_position(Position(-1, -1))
        return self._ledger.previous_position(first)

    def _durable(
        self,
        name: str,
        mark_delete: Position,
        *,
        individually_deleted: list[tuple[Position, Position]] | None = None,
        properties: dict[str, int] | None = None,
        batch_acks: dict[Position, tuple[int, ...]] | None = None,
        persisted: bool = False,
        last_persisted_ms: int = 0,
    ) -> ManagedCursorImpl:
        cursor = ManagedCursorImpl(
            self._ledger,
            name,
            mark_delete,
            storage=self,
            individually_deleted=individually_deleted or (),
            properties=properties,
            batch_acks=batch_acks,
            rate_limit=self._config.managed_ledger_default_mark_delete_rate_limit,
            max_ranges_to_persist=self._config.managed_ledger_max_unacked_ranges_to_persist,
            max_batch_acks_to_persist=(
                self._config.managed_ledger_max_batch_deleted_index_to_persist
            ),
            persisted=persisted,
            last_persisted_ms=last_persisted_ms,
        )
        cursor.moves = self._moves
        return cursor

    async def write_cursor(self, name: str, data: bytes) -> None:
        """Store a durable cursor's state (called by the cursor, rate-limited there)."""
        if self.write_error is not None:
            raise self.write_error
        await self._table.put(self._key(name), data)

    def new_non_durable(
        self, start: Position | None, inclusive: bool = False, name: str = ""
    ) -> ManagedCursorImpl:
        """A cursor kept in memory only (readers). ``start`` None: after last_confirmed; a
        position before the first entry: from the first entry; else from ``start`` if
        ``inclusive``, otherwise from the entry after it."""
        last = self._ledger.last_confirmed
        first = self._ledger.normalize_position(Position(-1, -1))
        if start is None:
            mark_delete = last
        elif start < first:
            mark_delete = self._ledger.previous_position(first)
        elif inclusive:
            mark_delete = self._ledger.previous_position(start)
        else:
            mark_delete = start
        return ManagedCursorImpl(self._ledger, name, min(mark_delete, last))

    async def delete(self, name: str) -> None:
        """Forget the cursor: wait for a write in progress, then store a tombstone."""
        async with self._lock:
            cursor = self._open.pop(name, None)
            if cursor is None and self._table.get(self._key(name)) is None:
                raise CursorNotFoundError(f"no cursor {name!r} on {self._name}")
            if cursor is not None:
                await cursor.discard()
            await self._table.delete(self._key(name))
        if self._moves is not None:
            self._moves.cursor_moved()  # the slowest cursor may have gone

    def opened(self) -> Mapping[str, ManagedCursorImpl]:
        """The durable cursors opened on this instance (a read-only view, not a copy)."""
        return MappingProxyType(self._open)

    def exists(self, name: str) -> bool:
        """True for a durable cursor that is stored (opened here or not)."""
        return name in self._open or self._table.get(self._key(name)) is not None

    def durable_mark_deletes(self) -> list[Position]:
        """Mark-delete positions of the opened durable cursors and of the stored ones."""
        positions = [c.mark_delete_position for c in self._open.values() if c.durable]
        prefix = formats.cursor_key_prefix(self._name)
        for key, value in self._table.items(prefix):
            if key[len(prefix) :] not in self._open:
                positions.append(formats.decode_cursor_info(value).mark_delete)
        return positions

    def stored_names(self) -> list[str]:
        prefix = formats.cursor_key_prefix(self._name)
        stored = {key[len(prefix) :] for key, _ in self._table.items(prefix)}
        return sorted(stored | set(self._open))

    async def close_all(self) -> list[tuple[str, BaseException]]:
        """Store every cursor's latest state; returns the failures."""
        cursors = list(self._open.values())
        results = await asyncio.gather(*(c.close() for c in cursors), return_exceptions=True)
        return [
            (cursor.name, result)
            for cursor, result in zip(cursors, results, strict=True)
            if isinstance(result, BaseException)
        ]

    async def discard_all(self) -> None:
        for cursor in list(self._open.values()):
            await cursor.discard()
