"""PIP-6 message deduplication for one topic: its lifecycle, snapshots and recovery.

The marks themselves (pushed, persisted, holes) are ``pip6.marks``. The persisted map is
snapshotted as the properties of the durable ``pulsar.dedup`` cursor, whose mark-delete
position says which entries the snapshot covers; recovery replays only the entries after
it, parsing little more than their metadata.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dedup_broker.errors import CursorNotFoundError, ProtocolError
from dedup_broker.lazy import LazyLock
from dedup_broker.pip6.activity import ProducerActivity
from dedup_broker.pip6.chunks import Chunk, ChunkProgress, ChunkVerdict
from dedup_broker.pip6.marks import SequenceMarks
from dedup_broker.pip6.snapshot_task import SnapshotTask
from dedup_broker.pip6.stored import ReplayFold, StoredSequence, stored_sequence
from dedup_broker.pip6.verdicts import DedupStatus, Verdict
from dedup_broker.protocol.commands import as_signed64
from dedup_broker.protocol.framing import parse_metadata_only
from dedup_broker.storage.api import Position

if TYPE_CHECKING:
    from dedup_broker.config import BrokerConfig
    from dedup_broker.storage.api import Entry, ManagedCursor, ManagedLedger

__all__ = [
    "DEDUP_CURSOR",
    "DedupStatus",
    "MessageDeduplication",
    "StoredSequence",
    "Verdict",
    "stored_sequence",
]

log = logging.getLogger(__name__)

DEDUP_CURSOR = "pulsar.dedup"
"""The durable cursor whose mark-delete properties hold the snapshot (Pulsar's name)."""

REPLAY_BATCH_ENTRIES = 1_000_000
"""Entries per scan while replaying: the state is merged (and the loop free of the
replay's thread) between scans; entries are folded as they arrive (memory stays flat)."""

Acknowledged = tuple[str, int, int, tuple[int, ...] | None, Position]
"""An entry acknowledged while recovering: producer, lowest and highest id, ids, where."""
_NOTHING_ACKED: list[Acknowledged] = []
"""Acknowledgements kept during a recovery: shared (and empty) outside of one."""


class MessageDeduplication:
    """The deduplication state machine of one topic (or one partition).

    Every method runs on the event loop; the synchronous ones (``check``,
    ``on_persisted`` ...) never yield, so a check and the append that follows it in the
    caller are atomic with respect to every other producer of the topic.
    """

    __slots__ = (
        "_acked_while_recovering",
        "_activity",
        "_clock",
        "_config",
        "_cursor",
        "_entries_since_snapshot",
        "_last_persisted",
        "_ledger",
        "_recovery_ms",
        "_snapshot_clock",
        "_snapshot_position",
        "_snapshot_wall_ms",
        "_snapshots",
        "_transition_lock",
        "_write_failed",
        "chunks",
        "marks",
        "snapshot_interval_seconds",
        "status",
    )

    def __init__(
        self,
        config: BrokerConfig,
        ledger: ManagedLedger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._ledger = ledger
        self._clock = clock
        # The quiet-topic snapshot interval; topic and namespace policies may override it.
        self.snapshot_interval_seconds = config.broker_deduplication_snapshot_interval_seconds
        self.status = DedupStatus.DISABLED
        self.marks = SequenceMarks(clock=clock)
        self.chunks = ChunkProgress()
        """Each producer's chunked message in progress (its chunks are stored once)."""
        self._activity = ProducerActivity(clock)
        self._cursor: ManagedCursor | None = None
        self._write_failed = False
        self._last_persisted: Position | None = None
        self._snapshot_position: Position | None = None
        self._snapshot_clock = clock()
        self._snapshot_wall_ms = 0
        self._entries_since_snapshot = 0
        self._recovery_ms = 0
        self._acked_while_recovering = _NOTHING_ACKED
        self._snapshots = SnapshotTask(ledger.name, self)
        self._transition_lock = LazyLock()

    # --- lifecycle ------------------------------------------------------------------
    async def enable(self) -> None:
        """Loads the snapshot, replays the entries after it, then starts deduplicating."""
        async with self._transition_lock:
            if self.status is DedupStatus.ENABLED:
                return
            self.status = DedupStatus.RECOVERING
            self._acked_while_recovering = []
            started = time.monotonic()
            try:
                await self._recover()
            except BaseException:
                self.status = DedupStatus.FAILED
                raise
            self.status = DedupStatus.ENABLED
            self._recovery_ms = round(1000 * (time.monotonic() - started))
            log.info(
                "deduplication enabled on %s: %d producers, snapshot at %s, "
                "%d entries replayed in %d ms",
                self._ledger.name,
                len(self.marks.persisted),
                self._snapshot_position,
                self._entries_since_snapshot,
                self._recovery_ms,
            )
            if self.snapshot_due():
                self._snapshots.start()

    async def _recover(self) -> None:
        cursor = await self._ledger.cursors.open(DEDUP_CURSOR, "earliest")
        self._cursor = cursor
        now = self._clock()
        stored = {name: as_signed64(seq) for name, seq in cursor.properties.items()}
        self.marks = SequenceMarks.restored(stored, self._clock)
        self.chunks = ChunkProgress()
        self._activity.reset(list(self.marks.persisted))
        self._write_failed = False
        snapshot = cursor.mark_delete_position
        self._snapshot_position = snapshot
        self._last_persisted = snapshot
        self._entries_since_snapshot = 0
        self._snapshot_clock = now
        self._snapshot_wall_ms = cursor.last_persisted_ms
        fold = ReplayFold(dict(self.marks.persisted))
        start = self._ledger.next_position(snapshot)
        while True:
            last = await self._ledger.scan_entries(start, REPLAY_BATCH_ENTRIES, fold)
            if last is None:
                break
            self._merge_replayed(fold, last)
            start = self._ledger.next_position(last)
        # Acknowledged during the replay: normally replayed too, but the last read may
        # have been answered just before one of them landed.
        for name, lowest, highest, ids, position in self._acked_while_recovering:
            self._raise_marks(name, lowest, highest, ids, position)
        self._acked_while_recovering = _NOTHING_ACKED
        # No await from here to the caller setting ENABLED: any entry acknowledged
        # later reaches on_persisted while ENABLED.
        self.marks.reset_pushed()

    async def disable(self) -> None:
        """Forgets everything and deletes the dedup cursor, so it holds back no ledger."""
        async with self._transition_lock:
            if self.status is DedupStatus.DISABLED:
                return
            self.status = DedupStatus.REMOVING
            try:
                await self._snapshots.cancel()
                async with self._snapshots.lock:
                    self._reset_state()
                    self._cursor = None
                    if self._ledger.cursors.exists(DEDUP_CURSOR):
                        with contextlib.suppress(CursorNotFoundError):
                            await self._ledger.cursors.delete(DEDUP_CURSOR)
            except BaseException:
                self.status = DedupStatus.FAILED
                raise
            self.status = DedupStatus.DISABLED

    async def close(self) -> None:
        """Takes a last snapshot when entries were persisted since the previous one.

        Best effort: a failure is logged, since the entries after the previous
        snapshot are replayed on the next open anyway. Call before closing the ledger.
        """
        await self._snapshots.close()
        if self.status is not DedupStatus.ENABLED or not self._has_unsnapshotted_entries():
            return
        try:
            await self.take_snapshot()
        except Exception as exc:
            log.warning("final deduplication snapshot of %s failed: %s", self._ledger.name, exc)

    def _reset_state(self) -> None:
        self.marks = SequenceMarks(clock=self._clock)
        self.chunks = ChunkProgress()
        self._activity.reset()
        self._write_failed = False
        self._last_persisted = None
        self._snapshot_position = None
        self._snapshot_wall_ms = 0
        self._entries_since_snapshot = 0

    # --- the publish path -------------------------------------------------------------
    def check(self, producer_name: str, lowest: int, highest: int, holes: bool = True) -> Verdict:
        """The verdict for a SEND covering sequence ids ``lowest..highest``.

        When NOT_DUP is returned the caller must write the entry right away (the pushed
        map already counts it); PARTLY_DUP, right away too, asks ``marks`` which of its
        messages are new (``keep_of``) and admits them (``admit_part``). While the state
        is recovering or failed nothing is admitted (UNKNOWN), so the client retries;
        while disabled everything is. ``holes``: False for the last chunk of a chunked
        message, judged by the mark alone as its earlier chunks are (``check_chunk``).
        While a failed write is being resolved nothing new is admitted either: an
        admitted write would still be in flight when pushed is reset to persisted, and
        a resend of it would then pass as new.
        """
        status = self.status
        if status is not DedupStatus.ENABLED:
            if status is DedupStatus.DISABLED or status is DedupStatus.REMOVING:
                return Verdict.NOT_DUP
            return Verdict.UNKNOWN
        low = as_signed64(lowest)
        high = max(as_signed64(highest), low)
        self._activity.touch(producer_name)
        return self.marks.check(producer_name, low, high, self._write_failed, holes)

    def check_chunk(self, chunk: Chunk) -> tuple[Verdict, Position | None]:
        """The verdict for an early chunk (any but the last) of a chunked message: a
        chunk stored already is a duplicate at its position, so that a message resent
        after a failover never holds the same chunk twice."""
        status = self.status
        if status is not DedupStatus.ENABLED:
            if status is DedupStatus.DISABLED or status is DedupStatus.REMOVING:
                return Verdict.NOT_DUP, None
            return Verdict.UNKNOWN, None
        name = chunk.producer_name
        self._activity.touch(name)
        persisted = self.marks.persisted.get(name)
        if persisted is not None and chunk.sequence_id <= persisted:
            return Verdict.DUP, None
        pushed = self.marks.pushed(name)
        if (pushed is not None and chunk.sequence_id <= pushed) or self._write_failed:
            return Verdict.UNKNOWN, None
        verdict, position = self.chunks.check(chunk)
        if verdict is ChunkVerdict.STORED:
            return Verdict.DUP, position
        return (Verdict.NOT_DUP if verdict is ChunkVerdict.NEW else Verdict.UNKNOWN), None

    def on_chunk_persisted(self, chunk: Chunk, position: Position) -> None:
        """Kafka acknowledged an early chunk."""
        if self.status in (DedupStatus.ENABLED, DedupStatus.RECOVERING):
            self.chunks.stored(chunk, position)
        if self.status is DedupStatus.ENABLED:
            self._count_unmarked(position)

    def on_persisted(
        self,
        producer_name: str,
        highest: int,
        position: Position,
        lowest: int | None = None,
        ids: tuple[int, ...] | None = None,
    ) -> None:
        """Kafka acknowledged an admitted entry holding ``lowest..highest`` (``ids`` when
        they are not exactly that run): raise persisted, maybe start a snapshot."""
        status = self.status
        high = as_signed64(highest)
        low = high if lowest is None else as_signed64(lowest)
        if status is DedupStatus.RECOVERING:
            self._acked_while_recovering.append((producer_name, low, high, ids, position))
            return
        if status is not DedupStatus.ENABLED:
            return
        self._record(producer_name, low, high, ids, position)
        self._activity.touch(producer_name)
        if self.snapshot_due():
            self._snapshots.start()

    def on_write_failed(self) -> None:
        """A Kafka write failed: admit nothing new until :meth:`resolve_after_failure`.

        Idempotent: call it for every failed write or once per failure, either works.
        """
        if self.status is DedupStatus.ENABLED:
            self._write_failed = True

    async def resolve_after_failure(self, entries: list[Entry]) -> None:
        """Storage established what really landed: count it as persisted, reset pushed.

        ``entries`` are those between the last acknowledged position and the true end
        of the ledger that failed (entries already acknowledged may be included). Since
        nothing was admitted after the failure, nothing of ours is in flight now; the
        call does not yield, so no check interleaves with the reset.
        """
        status = self.status
        if status is DedupStatus.RECOVERING:
            # The replay normally reads these too; kept in case it had just finished.
            for entry in entries:
                if (s := self._parse_entry(entry)) is not None:
                    acked = (s.producer_name, s.lowest, s.highest, s.ids, entry.position)
                    self._acked_while_recovering.append(acked)
            return
        if status is not DedupStatus.ENABLED:
            self._write_failed = False
            return
        self.chunks.failed()
        for entry in entries:
            self._record_entry(entry)
        self.marks.reset_pushed()
        self._write_failed = False
        if self.snapshot_due():
            self._snapshots.start()

    def last_sequence_id(self, producer_name: str) -> int:
        """The highest persisted sequence id of a producer, -1 if none is known."""
        return self.marks.persisted.get(producer_name, -1)

    def _record(
        self, name: str, lowest: int, highest: int, ids: tuple[int, ...] | None, position: Position
    ) -> None:
        self._raise_marks(name, lowest, highest, ids, position)
        self._entries_since_snapshot += 1

    def _raise_marks(
        self, name: str, lowest: int, highest: int, ids: tuple[int, ...] | None, position: Position
    ) -> None:
        if self.marks.record(name, lowest, highest, ids):
            self.chunks.complete(name, highest)
        if self._last_persisted is None or position > self._last_persisted:
            self._last_persisted = position

    def _merge_replayed(self, fold: ReplayFold, last: Position) -> None:
        """Counts what one replay scan folded, up to and including ``last``."""
        highest, entries, unreadable, chunks = fold.take()
        for ledger_id, entry_id, exc in unreadable:
            self._warn_unreadable(Position(ledger_id, entry_id), exc)
        for chunk, ledger_id, entry_id in chunks:
            self.chunks.stored(chunk, Position(ledger_id, entry_id))
        self.marks.replayed(fold.take_irregular(), entries)
        for name, sequence in highest.items():
            if self.marks.raise_to(name, sequence):
                self.chunks.complete(name, sequence)
            self._activity.touch(name)
        if self._last_persisted is None or last > self._last_persisted:
            self._last_persisted = last
        self._entries_since_snapshot += entries

    def _record_entry(self, entry: Entry) -> None:
        """Counts one stored entry (replay, failure resolution)."""
        stored = self._parse_entry(entry)
        if stored is None:
            try:
                chunk = Chunk.of(parse_metadata_only(entry.data))
            except ProtocolError:
                chunk = None
            if chunk is not None:
                self.chunks.stored(chunk, entry.position)
            self._count_unmarked(entry.position)
            return
        self._record(
            stored.producer_name, stored.lowest, stored.highest, stored.ids, entry.position
        )
        self._activity.touch(stored.producer_name)

    def _count_unmarked(self, position: Position) -> None:
        """An entry that moves no producer's mark (an early chunk, a marker)."""
        if self._last_persisted is None or position > self._last_persisted:
            self._last_persisted = position
        self._entries_since_snapshot += 1

    def _parse_entry(self, entry: Entry) -> StoredSequence | None:
        """The entry's sequence facts; entries without readable metadata are skipped."""
        try:
            return stored_sequence(entry.data)
        except ProtocolError as exc:
            self._warn_unreadable(entry.position, exc)
            return None

    def _warn_unreadable(self, position: Position, exc: ProtocolError) -> None:
        what = "has no readable metadata, ignored for deduplication"
        log.warning("entry %s of %s %s: %s", position, self._ledger.name, what, exc)

    # --- producers ------------------------------------------------------------------
    def producer_connected(self, name: str) -> None:
        """A connected producer is never dropped for inactivity."""
        self._activity.connected(name)

    def producer_disconnected(self, name: str) -> None:
        marks = self.marks
        self._activity.disconnected(name, marks.in_flight(name) or name in marks.persisted)

    def _drop_inactive(self) -> None:
        timeout = self._config.broker_deduplication_producer_inactivity_timeout_minutes * 60
        for name in self._activity.idle(timeout):
            if self.marks.in_flight(name):
                continue  # a write is in flight (or unresolved): keep its mark
            self.marks.forget(name)
            self.chunks.forget(name)
            self._activity.forget(name)
            log.info("deduplication on %s forgets inactive producer %r", self._ledger.name, name)

    # --- snapshots ------------------------------------------------------------------
    async def take_snapshot(self) -> None:
        """Stores persisted at the last persisted position on the dedup cursor, durably:
        every entry up to that position is reflected in the stored properties (except
        producers beyond the configured maximum, least recently active first), so
        recovery replays only what follows it. Positions only move forward."""
        await self.snapshot_once()

    async def snapshot_once(self) -> bool:
        """True when a new snapshot was stored."""
        async with self._snapshots.lock:
            cursor = self._cursor
            position = self._last_persisted
            if self.status is not DedupStatus.ENABLED or cursor is None or position is None:
                return False
            first_chunk = self.chunks.oldest_first_position()
            if first_chunk is not None:
                # Never past a chunked message in progress: recovery replays its chunks.
                position = min(position, self._ledger.previous_position(first_chunk))
            if self._snapshot_position is not None and position <= self._snapshot_position:
                self._entries_since_snapshot = 0
                return False
            counted = self._entries_since_snapshot
            limit = self._config.broker_deduplication_max_number_of_producers
            newest = self._activity.newest(self.marks.persisted, limit)
            cursor.mark_delete(position, self.marks.snapshot(newest))
            if cursor.mark_delete_position != position:
                # The cursor refused the move (it is ahead, or the entry is gone), so
                # the properties did not change either: nothing was snapshotted.
                log.warning(
                    "deduplication snapshot of %s at %s refused by its cursor (at %s)",
                    self._ledger.name,
                    position,
                    cursor.mark_delete_position,
                )
                return False
            await cursor.flush()
            self._snapshot_position = position
            self._entries_since_snapshot = max(0, self._entries_since_snapshot - counted)
            self._snapshot_clock = self._clock()
            self._snapshot_wall_ms = int(time.time() * 1000)
            return True

    def maybe_snapshot_on_timer(self) -> None:
        """Periodic housekeeping: forget idle producers, snapshot when the interval passed."""
        if self.status is not DedupStatus.ENABLED or self._snapshots.closed:
            return
        now = self._clock()
        self._drop_inactive()
        interval = self.snapshot_interval_seconds
        if (
            interval > 0
            and now - self._snapshot_clock >= interval
            and self._has_unsnapshotted_entries()
        ):
            self._snapshots.start()

    def _has_unsnapshotted_entries(self) -> bool:
        last = self._last_persisted
        snap = self._snapshot_position
        return last is not None and (snap is None or last > snap)

    def snapshot_due(self) -> bool:
        return self._entries_since_snapshot >= self._config.broker_deduplication_entries_interval

    # --- observability --------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """For the topic's admin stats."""
        snapshot = self._snapshot_position
        return {
            "status": self.status.value,
            "producers": len(self.marks.producer_names()),
            "lastSnapshotPosition": str(snapshot) if snapshot is not None else "-1:-1",
            "lastSnapshotTime": self._snapshot_wall_ms,
            "entriesSinceSnapshot": self._entries_since_snapshot,
            "snapshotIntervalSeconds": self.snapshot_interval_seconds,
            "lastRecoveryMillis": self._recovery_ms,
            "snapshotsTaken": self._snapshots.stored,
            "snapshotFailures": self._snapshots.failed,
        }
