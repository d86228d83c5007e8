"""Reading keys back from the log: the window after a restart or a Redis loss, and the
entries that landed after a failed write. The log is the source of truth for keys."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from dedup_broker.errors import BrokerError, ProtocolError
from dedup_broker.key_dedup.window import KeyDedupPolicy, KeySource, now_ms, stored_keys

if TYPE_CHECKING:
    from dedup_broker.key_dedup.scope import KeyScope
    from dedup_broker.storage.api import Entry, ManagedLedger, Position

log = logging.getLogger(__name__)

CHUNK = 500
READ_ATTEMPTS = 20


async def chunks(
    ledger: ManagedLedger, start: Position, last: Position
) -> AsyncIterator[list[Entry]]:
    """Entries from ``start`` to ``last`` inclusive, a chunk at a time."""
    position = start
    while position <= last:
        chunk = [e for e in await ledger.read_entries(position, CHUNK) if e.position <= last]
        if not chunk:
            return
        yield chunk
        position = ledger.next_position(chunk[-1].position)


def _keys(ledger: ManagedLedger, entry: Entry, source: KeySource) -> list[bytes]:
    try:
        return stored_keys(entry.data, source)
    except ProtocolError as exc:
        log.warning("%s: entry %s has no readable keys: %s", ledger.name, entry.position, exc)
        return []


KeyWriter = Callable[[list[tuple[list[bytes], int]], str, str], Awaitable[None]]
"""Writes the keys of one managed ledger's entries, ``(keys, publish ms)`` per entry, to
Redis with its checkpoint."""


async def replay(
    write: KeyWriter, policy: KeyDedupPolicy, ledger: ManagedLedger, after: Position | None
) -> str | None:
    """Writes the keys of stored entries after ``after`` (else of the whole window) to
    Redis; answers the last position covered, the topic's new checkpoint."""
    last = ledger.last_confirmed
    started = now_ms()
    if after is None:
        start = await ledger.find_position_by_time(started - policy.window_ms)
    else:
        start = ledger.next_position(after)
    done = str(after) if after is not None else None
    replayed = 0
    async for chunk in chunks(ledger, start, last):
        items = [
            (_keys(ledger, entry, policy.key_source), entry.timestamp_ms)
            for entry in chunk
            if entry.timestamp_ms + policy.window_ms > started
        ]
        done = str(chunk[-1].position)
        await write(items, ledger.name, done)
        replayed += len(chunk)
    if replayed:
        log.info("%s: %d entr(ies) of the key window replayed into Redis", ledger.name, replayed)
    return done


async def landed_keys(
    ledger: ManagedLedger, told: Position, truth: Position, source: KeySource
) -> dict[bytes, tuple[int, Position]]:
    """Keys of the entries Kafka stored after ``told`` up to ``truth`` (a failed write)."""
    for _attempt in range(READ_ATTEMPTS):
        landed: dict[bytes, tuple[int, Position]] = {}
        try:
            if told < truth:
                async for chunk in chunks(ledger, ledger.next_position(told), truth):
                    for entry in chunk:
                        for key in _keys(ledger, entry, source):
                            landed[key] = (entry.timestamp_ms, entry.position)
            return landed
        except BrokerError as exc:
            log.warning("%s: cannot read back landed entries yet: %s", ledger.name, exc)
            await asyncio.sleep(1.0)
    raise BrokerError(f"{ledger.name}: entries after a failed write could not be read back")


def store_landed(
    scope: KeyScope,
    ledger: str,
    failed: Iterable[list[bytes]],
    landed: dict[bytes, tuple[int, Position]],
) -> list[bytes]:
    """After a failed write: the keys that landed are stored (remembered), the others
    answered, to be freed. The scope's checkpoint moves again."""
    lost: list[bytes] = []
    for keys in failed:
        for key in keys:
            if key in landed:
                anchor, at = landed[key]
                scope.stored([key], anchor, ledger, str(at))
            else:
                lost.append(key)
    scope.hold_checkpoint(ledger, False)
    log.info(
        "%s: after a failed write %d key(s) had landed, %d are free again",
        ledger,
        len(landed),
        len(lost),
    )
    return lost
