"""A cursor: what one subscription has acknowledged, and where it reads next.

Everything ``<=`` the mark-delete position is acknowledged, plus individually
acknowledged ranges above it; batches acknowledged in part keep the set of their messages
still unacknowledged (batch-index acknowledgement). Acknowledgements change memory at
once; a durable cursor's writer (``writer.py``) stores them, rate-limited, so that after a
crash a cursor is at most one write interval behind: redelivery, never loss.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from dedup_broker.lazy import LazyLock
from dedup_broker.storage import formats
from dedup_broker.storage.api import readable_end
from dedup_broker.storage.cursor.range_set import PositionRangeSet
from dedup_broker.storage.cursor.writer import CursorStorage, CursorWriter
from dedup_broker.storage.values import DEFAULT_MAX_BYTES, Entry, Position

log = logging.getLogger(__name__)


class CursorMoves(Protocol):
    def cursor_moved(self) -> None:
        """A cursor's mark-delete position entered another ledger, or a cursor went."""


class CursorLedger(Protocol):
    """What a cursor needs from its managed ledger."""

    @property
    def last_confirmed(self) -> Position: ...
    @property
    def read_limit(self) -> Position | None: ...
    def next_position(self, p: Position) -> Position: ...
    def previous_position(self, p: Position) -> Position: ...
    def is_valid_position(self, p: Position) -> bool: ...
    def entries_between(self, start: Position, end: Position) -> int: ...
    def normalize_position(self, p: Position) -> Position: ...
    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]: ...


_NO_BATCH_ACKS: dict[Position, tuple[int, ...]] = {}
"""Shared by every cursor with no batch acknowledged in part (never written to)."""

_NO_PROPERTIES: dict[str, int] = {}
"""Shared by every cursor whose last mark-delete carried no properties (never written to)."""


class ManagedCursorImpl:
    __slots__ = (
        "_batch_acks",
        "_ledger",
        "_mark_delete",
        "_max_batch_acks",
        "_max_ranges",
        "_notified_ledger",
        "_ranges",
        "_read_lock",
        "_read_position",
        "_seek_epoch",
        "_writer",
        "durable",
        "moves",
        "name",
        "properties",
    )

    def __init__(
        self,
        ledger: CursorLedger,
        name: str,
        mark_delete: Position,
        *,
        storage: CursorStorage | None = None,
        individually_deleted: Iterable[tuple[Position, Position]] = (),
        properties: dict[str, int] | None = None,
        batch_acks: Mapping[Position, Sequence[int]] | None = None,
        read_position: Position | None = None,
        rate_limit: float = 1.0,
        max_ranges_to_persist: int = 10000,
        max_batch_acks_to_persist: int = 10000,
        persisted: bool = False,
        last_persisted_ms: int = 0,
    ) -> None:
        self.name = name
        self.durable = storage is not None
        self._ledger = ledger
        self._mark_delete = mark_delete
        self._ranges = PositionRangeSet()
        for start, end in individually_deleted:
            if start > mark_delete:
                self._ranges.add_range(start, end)
        self.properties: dict[str, int] = dict(properties) if properties else _NO_PROPERTIES
        """Replaced, never changed in place: most cursors share the empty one."""
        self._batch_acks: dict[Position, tuple[int, ...]] = {
            p: tuple(words)
            for p, words in (batch_acks or {}).items()
            if p > mark_delete and p not in self._ranges and any(words)
        } or _NO_BATCH_ACKS
        """Entries acknowledged in part -> bits of their messages not acknowledged yet."""
        self._read_position = read_position or ledger.next_position(mark_delete)
        self._seek_epoch = 0
        self._read_lock = LazyLock()
        self._max_ranges = max_ranges_to_persist
        self._max_batch_acks = max_batch_acks_to_persist
        self._writer = (
            CursorWriter(
                name,
                storage,
                self,
                rate_limit=rate_limit,
                persisted_at=mark_delete if persisted else None,
                last_persisted_ms=last_persisted_ms,
            )
            if storage is not None
            else None
        )
        """Durable cursors only; one never stored is written by the first flush()."""
        self.moves: CursorMoves | None = None
        """Told when the mark-delete position enters another ledger (trimming)."""
        self._notified_ledger = mark_delete.ledger_id

    def __repr__(self) -> str:
        return f"ManagedCursorImpl({self.name!r}, mark_delete={self._mark_delete})"

    # --- state ----------------------------------------------------------------------
    @property
    def mark_delete_position(self) -> Position:
        return self._mark_delete

    @property
    def read_position(self) -> Position:
        return self._ledger.normalize_position(self._read_position)

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        return list(self._ranges)

    def is_acknowledged(self, p: Position) -> bool:
        return p <= self._mark_delete or p in self._ranges

    def batch_ack_set(self, p: Position) -> tuple[int, ...]:
        """The messages of a batch acknowledged in part that are not acknowledged yet (a
        bit set in 64-bit words, as clients send and expect it); empty if none was."""
        return self._batch_acks.get(p, ())

    def batch_acks(self) -> dict[Position, tuple[int, ...]]:
        return dict(self._batch_acks)

    def backlog(self) -> int:
        last = readable_end(self._ledger)
        start = self._ledger.next_position(self._mark_delete)
        if start > last:
            return 0
        pending = self._ledger.entries_between(start, last)
        return max(pending - self._ranges.count_between(start, last), 0)

    def has_more_entries(self) -> bool:
        return self._skip_acknowledged(self.read_position) <= readable_end(self._ledger)

    def _skip_acknowledged(self, p: Position) -> Position:
        """The first position at or after ``p`` not acknowledged."""
        if p <= self._mark_delete:
            p = self._ledger.next_position(self._mark_delete)
        while (acked := self._ranges.range_containing(p)) is not None:
            p = self._ledger.next_position(acked[1])
        return p

    # --- reading --------------------------------------------------------------------
    async def read_entries(
        self, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Entry]:
        """Entries from the read position on, skipping acknowledged ones.

        The read position moves past what is returned, unless ``seek``/``rewind``/
        ``reset`` moved it while the read was in progress (then theirs wins).
        """
        async with self._read_lock:
            epoch = self._seek_epoch
            result: list[Entry] = []
            size = 0
            position = self.read_position
            done = max_entries <= 0
            while not done:
                position = self._skip_acknowledged(position)
                end = readable_end(self._ledger)
                if position > end:
                    break
                remaining = max_bytes - size if result else max_bytes
                wanted = max_entries - len(result)
                acked = self._ranges.first_after(position)
                if acked is not None and acked[0].ledger_id == position.ledger_id:
                    # Stop before the next acknowledged run instead of reading it.
                    wanted = min(wanted, acked[0].entry_id - position.entry_id)
                if position.ledger_id == end.ledger_id:
                    wanted = min(wanted, end.entry_id - position.entry_id + 1)
                batch = await self._ledger.read_entries(position, wanted, max(remaining, 1))
                if not batch:
                    break
                for entry in batch:
                    if entry.position > end:
                        done = True
                        break
                    if self.is_acknowledged(entry.position):
                        position = self._ledger.next_position(entry.position)
                        continue
                    if result and size + len(entry.data) > max_bytes:
                        done = True
                        break
                    result.append(entry)
                    size += len(entry.data)
                    position = self._ledger.next_position(entry.position)
                    if len(result) >= max_entries or size >= max_bytes:
                        done = True
                        break
            if epoch == self._seek_epoch:
                self._read_position = position
            return result

    def rewind(self) -> None:
        """Read again from the first unacknowledged entry."""
        self._read_position = self._ledger.next_position(self._mark_delete)
        self._seek_epoch += 1

    def seek(self, read_position: Position) -> None:
        self._read_position = read_position
        self._seek_epoch += 1

    # --- acknowledging --------------------------------------------------------------
    def mark_delete(self, p: Position, properties: dict[str, int] | None = None) -> None:
        """Cumulative acknowledgement of everything up to ``p``.

        ``p`` is an existing entry, or ``(L, -1)``: everything before ledger ``L`` (what a
        client sends for the entry before the first one of a ledger). Any other position
        names an entry the ledger does not have and is ignored, so an acknowledgement never
        moves the cursor past entries it did not name."""
        target = self._mark_delete_target(p)
        if target is None or target <= self._mark_delete:
            return
        self._mark_delete = target
        self.properties = dict(properties) if properties else _NO_PROPERTIES
        self._ranges.remove_up_to(p)
        self._drop_passed_batch_acks()
        self._advance_over_ranges()
        self._state_changed()

    def _mark_delete_target(self, p: Position) -> Position | None:
        if p > self._ledger.last_confirmed:
            log.debug("cursor %s: ignoring mark-delete beyond the last entry: %s", self.name, p)
            return None
        if self._ledger.is_valid_position(p):
            return p
        if p.entry_id == -1:
            return self._ledger.previous_position(Position(p.ledger_id, 0))
        log.warning("cursor %s: ignoring mark-delete at %s, which is no entry", self.name, p)
        return None

    def _can_acknowledge(self, p: Position) -> bool:
        return (
            p > self._mark_delete
            and p <= self._ledger.last_confirmed
            and self._ledger.is_valid_position(p)
        )

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acknowledgements."""
        changed = False
        for p in positions:
            if not self._can_acknowledge(p):
                continue
            changed |= self._ranges.add(p)
            changed |= self._batch_acks.pop(p, None) is not None
        if changed:
            self._advance_over_ranges()
            self._state_changed()

    def delete_batch_indexes(self, p: Position, unacked: Sequence[int]) -> bool:
        """Acknowledge part of the batch at ``p``: ``unacked`` has a bit set for each of
        its messages not acknowledged (the client's ack set; words beyond it count as
        acknowledged). Sets of several calls combine; once no message is left the whole
        entry is acknowledged. True if the entry is acknowledged now."""
        if self.is_acknowledged(p):
            return True
        if not self._can_acknowledge(p):
            return False
        previous = self._batch_acks.get(p)
        if previous is None:
            left = tuple(unacked)
        else:
            left = tuple(a & b for a, b in zip(previous, unacked, strict=False))
        if not any(left):
            self.delete([p])
            return True
        if left != previous:
            if self._batch_acks is _NO_BATCH_ACKS:
                self._batch_acks = {}
            self._batch_acks[p] = left
            self._state_changed()
        return False

    def _advance_over_ranges(self) -> None:
        """Move mark-delete over individually acknowledged runs that now follow it."""
        while self._ranges:
            first = self._ranges.first()
            assert first is not None
            if first[0] != self._ledger.next_position(self._mark_delete):
                break
            self._ranges.pop_first()
            self._mark_delete = first[1]
            # As in Pulsar: properties belong to an explicit mark-delete only.
            self.properties = _NO_PROPERTIES
        # Entries in ranges are acknowledged whole: none of them has an ack set to drop.
        if self._read_position <= self._mark_delete:
            self._read_position = self._ledger.next_position(self._mark_delete)

    def _drop_passed_batch_acks(self) -> None:
        """Ack sets of entries at or before the mark-delete position are not state."""
        for passed in [p for p in self._batch_acks if p <= self._mark_delete]:
            del self._batch_acks[passed]

    async def reset(self, p: Position) -> None:
        """Everything before ``p`` acknowledged, nothing from ``p`` on; stored before
        returning."""
        self._mark_delete = self._ledger.previous_position(p)
        self._ranges.clear()
        self._batch_acks = _NO_BATCH_ACKS
        self.properties = _NO_PROPERTIES
        self._read_position = p
        self._seek_epoch += 1
        if self._writer is not None:
            await self._writer.flush(changed=True)

    # --- persistence ----------------------------------------------------------------
    def record(self) -> formats.CursorRecord:
        """The state to store (at most the configured numbers of ranges and ack sets)."""
        ranges = list(self._ranges)[: self._max_ranges]
        batches = sorted(self._batch_acks)[: max(self._max_batch_acks, 0)]
        return formats.CursorRecord(
            mark_delete=self._mark_delete,
            individually_deleted=ranges,
            properties=dict(self.properties),
            last_active_ms=int(time.time() * 1000),
            batch_acks={p: self._batch_acks[p] for p in batches},
        )

    def _state_changed(self) -> None:
        writer = self._writer
        if writer is None or writer.closed:
            return
        if self._mark_delete.ledger_id != self._notified_ledger:
            self._notified_ledger = self._mark_delete.ledger_id
            if self.moves is not None:
                self.moves.cursor_moved()
        writer.changed()

    @property
    def persisted_mark_delete_position(self) -> Position:
        """The mark-delete position last stored (``(-1, -1)``: none)."""
        writer = self._writer
        return writer.persisted_mark_delete_position if writer else Position(-1, -1)

    @property
    def last_persisted_ms(self) -> int:
        return self._writer.last_persisted_ms if self._writer else 0

    async def flush(self) -> None:
        """Store the current state now if it changed (raises StorageError on failure)."""
        if self._writer is not None:
            await self._writer.flush()

    async def close(self) -> None:
        """Store the latest state and stop writing (used when the ledger closes)."""
        if self._writer is not None:
            await self._writer.close()

    async def discard(self) -> None:
        """Stop writing without storing more; waits for a write in progress (deletion)."""
        if self._writer is not None:
            await self._writer.discard()
