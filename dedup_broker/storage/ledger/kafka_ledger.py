"""A managed ledger on Kafka: its write side, and how one is opened.

The write side composes the append pipeline, rollovers, the recovery after a failed
write and the stored ledger list; trimming and offloading run beside it. The
``ManagedLedgerInfo`` record is written only when ledgers are created or closed. Before
each such write the stored record is compared with the last one this instance wrote
(``info_store.py``): if another broker changed it, this instance stops ("Closed")
instead of overwriting the newer state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from dedup_broker.errors import ManagedLedgerClosedError
from dedup_broker.storage.api import WriteFence
from dedup_broker.storage.ledger.appends import AppendPipeline
from dedup_broker.storage.ledger.confirmed import ConfirmedLedgers
from dedup_broker.storage.ledger.context import StorageContext
from dedup_broker.storage.ledger.entry_reader import EntryReader
from dedup_broker.storage.ledger.info_store import LedgerInfoWriter
from dedup_broker.storage.ledger.ledger_list import LedgerList
from dedup_broker.storage.ledger.list_store import LedgerListStore
from dedup_broker.storage.ledger.managed_ledger import ManagedLedgerImpl, WriterEvents, WriteSide
from dedup_broker.storage.ledger.offloads import LedgerOffloads
from dedup_broker.storage.ledger.opening import open_ledger_list
from dedup_broker.storage.ledger.recovery import WriteRecovery
from dedup_broker.storage.ledger.rolling import LedgerRollover
from dedup_broker.storage.ledger.trimmer import LedgerTrimmer
from dedup_broker.storage.values import LedgerState, LedgerToDelete, Position

log = logging.getLogger(__name__)


class KafkaLedgerWriter:
    """The write side of a managed ledger on Kafka."""

    __slots__ = ("_confirmed", "_ctx", "_store", "appends", "name", "recovery", "rollover")

    def __init__(
        self,
        ctx: StorageContext,
        confirmed: ConfirmedLedgers,
        store: LedgerListStore,
        fence: WriteFence | None,
        events: WriterEvents,
    ) -> None:
        self.name = store.name
        self._ctx = ctx
        self._confirmed = confirmed
        self._store = store
        self.appends = AppendPipeline(self.name, ctx, confirmed, fence, events)
        self.rollover = LedgerRollover(ctx, confirmed, store, self.appends, events)
        self.recovery = WriteRecovery(ctx, confirmed, store, self.appends, events)
        self.appends.rollover = self.rollover
        self.appends.recovery = self.recovery

    @property
    def state(self) -> LedgerState:
        return self.appends.state

    @property
    def properties(self) -> dict[str, str]:
        return self._store.properties

    def is_writable_state(self) -> bool:
        return self.appends.is_writable_state()

    def check_open(self) -> None:
        if self.appends.state == LedgerState.CLOSED:
            raise self.appends.not_writable()
        if self.appends.closing:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closing")

    def check_readable(self) -> None:
        if self.appends.state == LedgerState.CLOSED:
            raise self.appends.not_writable()

    def append(self, data: bytes, timestamp_ms: int) -> asyncio.Future[Position]:
        return self.appends.append(data, timestamp_ms)

    async def wait_writable(self) -> None:
        await self.appends.writable.wait()

    async def set_properties(self, properties: dict[str, str]) -> None:
        await self._store.set_properties(properties)

    # --- closing --------------------------------------------------------------------
    def begin_close(self) -> bool:
        appends = self.appends
        if appends.state == LedgerState.CLOSED or appends.closing:
            return False
        appends.closing = True
        self.rollover.rolling = False
        self.rollover.cancel_timer()
        return True

    async def finish(self) -> None:
        """Fail what was not sent, let what was settle, record the current ledger closed."""
        appends, store, confirmed = self.appends, self._store, self._confirmed
        appends.fail_queued()
        await self.recovery.cancel()
        await self.rollover.cancel()
        timeout = self._ctx.config.kafka_delivery_timeout_ms / 1000 + 5
        try:
            await asyncio.wait_for(appends.drained.wait(), timeout)
        except TimeoutError:
            # Such a write may still land: the ledger stays listed open, so whoever opens
            # it next seals it and finds its true end.
            log.warning("%s: appends still unacknowledged at close; left open", self.name)
            return
        await appends.wait_committed(timeout)
        if appends.state == LedgerState.OPEN and confirmed.ledgers.current is not None:
            async with store.lock:
                closed = store.closing_current()
                try:
                    await store.write(store.with_current(closed))
                    confirmed.close_current(closed.entries, closed.size, closed.timestamp_ms)
                except Exception as exc:
                    log.warning(
                        "%s: recording the closed ledger failed (recovered on open): %s",
                        self.name,
                        exc,
                    )

    def stop(self, error: Exception) -> None:
        self.appends.stop(error)

    def closed(self) -> None:
        self.appends.closed()


async def open_kafka_ledger(
    name: str,
    ctx: StorageContext,
    on_closed: Callable[[ManagedLedgerImpl], None],
    fence: WriteFence | None = None,
) -> ManagedLedgerImpl:
    """Recover the stored state (closing a ledger left open by a crash at its true end)
    and start a ledger for appends (or leave that to the first append: lazy creation).
    With ``fence``, acknowledgements and metadata writes go through the slot's write
    fence."""
    infos, cursor_infos = ctx.tables(fence)
    confirmed = ConfirmedLedgers(name)
    info = LedgerInfoWriter(name, infos)
    side = _KafkaWriteSide(ctx, confirmed, LedgerListStore(name, confirmed, info, ctx.cache), fence)
    reader = EntryReader(name, ctx.ledgers, ctx.cache, ctx.offloader)
    ledger = ManagedLedgerImpl(
        name, confirmed, reader, cursor_infos, ctx.config, side, on_closed, fence
    )
    opened = await open_ledger_list(name, ctx, info, side.trimmer)
    side.store.opened(opened.properties)
    ledgers = LedgerList(opened.ledgers)
    resumed = opened.resumed
    if resumed is not None:
        ledgers.resume_current(resumed.entries, resumed.size)
    confirmed.reset(ledgers)
    if ledgers.current is not None:
        side.writer.appends.start_ledger(
            ledgers.last_id, ledgers.current_entries, ledgers.current_size
        )
    else:  # created lazily, by the first append
        side.writer.appends.no_ledger()
    if opened.dropped:
        await ctx.deleter.after_metadata(
            [LedgerToDelete(name, ledger_id) for ledger_id in opened.dropped]
        )
    side.offloads.on_open()
    return ledger


@dataclass(slots=True)
class _KafkaWriteSide:
    """Builds the write side once the managed ledger it serves exists."""

    ctx: StorageContext
    confirmed: ConfirmedLedgers
    store: LedgerListStore
    fence: WriteFence | None
    writer: KafkaLedgerWriter = field(init=False)
    trimmer: LedgerTrimmer = field(init=False)
    offloads: LedgerOffloads = field(init=False)

    def __call__(self, ledger: ManagedLedgerImpl, events: WriterEvents) -> WriteSide:
        ctx = self.ctx
        self.writer = KafkaLedgerWriter(ctx, self.confirmed, self.store, self.fence, events)
        self.trimmer = LedgerTrimmer(ledger, self.store, self.writer, ctx)
        self.offloads = LedgerOffloads(ledger, self.store, self.writer, ctx, self.trimmer.lock)
        return WriteSide(self.writer, self.trimmer, self.offloads)
