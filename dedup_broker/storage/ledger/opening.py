"""Opening a managed ledger: the stored ledger list made safe to append after.

Runs while nothing else touches the managed ledger (before it serves anyone): it reads the
stored list to its end (the write fence, if any, is held, so every earlier holder's
committed writes are visible), secures the deletion of ledgers a crash left unlisted,
closes a ledger left open at the end Kafka really has, drops empty ledgers at the end and
lists a ledger for appends.

The ledger for appends is the last one again when its previous holder closed it cleanly
(after a graceful unload, handover or shutdown): nothing was written into its topic since
(Kafka's end is where the list ends it), it is not full and not offloaded. Only a ledger
left open by a crash is sealed, so only then, or when the last ledger cannot take more, is
a fresh ledger created. A Kafka topic per load would otherwise pile up: a broker restart
with 10,000 idle topics created 10,000 more (docs/storage.md, "Many topics"). With
inactive ledgers closed (``managedLedgerInactiveLedgerRolloverTimeSeconds``) no fresh
ledger is created here at all: the first append creates it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dedup_broker.errors import StorageError
from dedup_broker.storage import formats
from dedup_broker.storage.ledger.context import StorageContext
from dedup_broker.storage.ledger.info_store import LedgerInfoWriter
from dedup_broker.storage.ledger.trimmer import LedgerTrimmer
from dedup_broker.storage.values import LedgerInfo, LedgerToDelete

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OpenedList:
    ledgers: list[LedgerInfo]
    """The stored list; its last ledger is the open one (none is, with lazy creation)."""
    properties: dict[str, str]
    dropped: list[int]
    """Empty ledgers left out of the stored list: their deletion is to be finished."""
    resumed: LedgerInfo | None = None
    """The last ledger as its previous holder closed it, when appends go on in it."""


async def open_ledger_list(
    name: str, ctx: StorageContext, info: LedgerInfoWriter, trimmer: LedgerTrimmer
) -> OpenedList:
    await ctx.managed_ledger_infos.refresh()
    stored = ctx.managed_ledger_infos.get(name)
    info.last = stored
    record = (
        formats.decode_managed_ledger_info(stored)
        if stored is not None
        else formats.ManagedLedgerRecord([])
    )
    info.last_listed = record.last_listed_id
    ledgers = list(record.ledgers)
    orphans: list[int] = []
    if record.last_listed_id >= 0:
        # Ledgers allocated to this name after the last listed one were never listed:
        # a crash between creating a ledger and recording it.
        listed = {ledger.ledger_id for ledger in ledgers}
        allocated = await ctx.ledgers.allocated_to(name, record.last_listed_id)
        orphans = [ledger_id for ledger_id in allocated if ledger_id not in listed]
    if orphans:
        # Before a new ledger is listed: until their deletion is recorded they still
        # follow the last listed ledger, so a crash here finds them again next time.
        log.warning("%s: ledgers %s were never listed; deleting them", name, orphans)
        if set(await trimmer.delete_orphans(orphans)) != set(orphans):
            raise StorageError(f"{name}: the deletion of unlisted ledgers not recorded")
    resumed: LedgerInfo | None = None
    if ledgers and ledgers[-1].is_open:
        # Sealed on the way: a writer that may still be alive can add nothing.
        ledgers[-1] = await ctx.ledgers.close_at_true_end(ledgers[-1].ledger_id)
    elif ledgers and await _resumable(ledgers[-1], ctx):
        resumed = ledgers[-1]
    # Empty ledgers at the end hold nothing; drop them rather than pile them up.
    empty = []
    while resumed is None and ledgers and ledgers[-1].entries == 0:
        empty.append(ledgers.pop())
    # Until the list without them is stored, a worker asking is told to come back.
    with ctx.pending_deletions.during(name, [ledger.ledger_id for ledger in empty]):
        dropped = await ctx.deleter.mark([LedgerToDelete(name, e.ledger_id) for e in empty])
        ledgers.extend(ledger for ledger in reversed(empty) if ledger.ledger_id not in dropped)
        if resumed is not None:
            # Listed open again first: a crash from here on seals it and finds its end.
            ledgers[-1] = LedgerInfo(resumed.ledger_id, -1, resumed.size, 0)
        elif not ctx.rollover.lazy:
            ledgers.append(LedgerInfo(await ctx.ledgers.create(name), -1, 0, 0))
        await info.write(ledgers, record.properties)
    return OpenedList(ledgers, dict(record.properties), sorted(dropped), resumed)


async def _resumable(last: LedgerInfo, ctx: StorageContext) -> bool:
    """Appends may go on in ``last``, a closed ledger: not offloaded, not full, and its
    topic ends where the list ends it (a clean close; a sealed ledger is never closed
    last in a stored list, recovery lists its successor with it)."""
    if last.offload is not None or ctx.rollover.is_full(last.entries, last.size):
        return False
    return await ctx.ledgers.ends_after(last.ledger_id, last.entries)
