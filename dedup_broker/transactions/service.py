"""The transaction coordinators this broker serves.

Coordinator N belongs to whoever owns partition N of Pulsar's
``pulsar/system/transaction_coordinator_assign`` (the clients look that partition up
and open the coordinator where it lives). Here that is the owner of the partition's
slot: the coordinator's log is opened with the slot's write fence and recovered before
the first request is answered, and it is closed when the slot goes to another broker,
whose recovery then finds every change this broker was told to make.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from prometheus_client import CollectorRegistry

from dedup_broker.cluster.service import Cluster, NotOwnerError
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import BrokerError
from dedup_broker.storage.api import StorageService
from dedup_broker.transactions.buffer import DISABLED_MESSAGE, TransactionsDisabledError
from dedup_broker.transactions.coordinator import TransactionCoordinator, TransactionEnder
from dedup_broker.transactions.coordinator_log import CoordinatorLog, log_ledger_name
from dedup_broker.transactions.errors import CoordinatorNotReadyError
from dedup_broker.transactions.metrics import CoordinatorMetrics

log = logging.getLogger(__name__)

ASSIGN_TOPIC = TopicName.parse("persistent://pulsar/system/transaction_coordinator_assign")
"""Its partitions are the coordinators (Pulsar's ``TRANSACTION_COORDINATOR_ASSIGN``)."""
TIMEOUT_CHECK_SECONDS = 1.0


class TransactionCoordinators:
    def __init__(
        self,
        config: BrokerConfig,
        storage: StorageService,
        cluster: Cluster | None,
        ender: TransactionEnder,
        registry: CollectorRegistry | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self._storage = storage
        self._cluster = cluster
        self._ender = ender
        self._clock_ms = clock_ms
        self.served: dict[int, TransactionCoordinator] = {}
        self._loading: dict[int, asyncio.Task[TransactionCoordinator]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._timeouts: asyncio.Task[None] | None = None
        if registry is not None and config.transaction_coordinator_enabled:
            registry.register(CoordinatorMetrics(lambda: self.served))

    @property
    def enabled(self) -> bool:
        return self.config.transaction_coordinator_enabled

    def check_enabled(self) -> None:
        if not self.enabled:
            raise TransactionsDisabledError(DISABLED_MESSAGE)

    async def coordinator(self, coordinator_id: int) -> TransactionCoordinator:
        """Coordinator ``coordinator_id``, recovered here on first use; raises
        ``CoordinatorNotReadyError`` (the client looks it up again) where it is not."""
        self.check_enabled()
        if not 0 <= coordinator_id < self.config.transaction_coordinator_count:
            raise CoordinatorNotReadyError(
                f"there is no transaction coordinator {coordinator_id} "
                f"(transactionCoordinatorCount={self.config.transaction_coordinator_count})"
            )
        served = self.served.get(coordinator_id)
        if served is not None and served.broken is not None:
            await self._close([coordinator_id])  # recovered again from its log, below
            served = None
        if served is not None:
            self._check_owned(coordinator_id)
            return served
        loading = self._loading.get(coordinator_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(coordinator_id))
            self._loading[coordinator_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(coordinator_id, None))
        try:
            return await asyncio.shield(loading)
        except CoordinatorNotReadyError:
            raise
        except BrokerError as exc:
            raise CoordinatorNotReadyError(
                f"transaction coordinator {coordinator_id} is not ready: {exc}"
            ) from exc

    def _check_owned(self, coordinator_id: int) -> int | None:
        """The slot of the coordinator's partition (None without a cluster)."""
        if self._cluster is None:
            return None
        try:
            return self._cluster.check_owned(ASSIGN_TOPIC.partition(coordinator_id))
        except NotOwnerError:
            raise CoordinatorNotReadyError(
                f"transaction coordinator {coordinator_id} is served by another broker"
            ) from None

    async def _load(self, coordinator_id: int) -> TransactionCoordinator:
        slot = self._check_owned(coordinator_id)
        fence = None
        if self._cluster is not None and slot is not None:
            fence = await self._cluster.fence_for(slot)
        ledger = await self._storage.open_managed_ledger(
            log_ledger_name(coordinator_id), create=True, fence=fence
        )
        try:
            coordinator_log = await CoordinatorLog.recover(ledger, coordinator_id)
        except BaseException:
            await ledger.close()
            raise
        if self._clock_ms is None:
            coordinator = TransactionCoordinator(coordinator_log, self._ender)
        else:
            coordinator = TransactionCoordinator(coordinator_log, self._ender, self._clock_ms)
        if self._cluster is not None and slot is not None and not self._cluster.owns_slot(slot):
            await coordinator.close()  # the slot left while the log was read
            self._check_owned(coordinator_id)
        self.served[coordinator_id] = coordinator
        live = len(coordinator.live())
        log.info("transaction coordinator %d recovered: %d live transactions", coordinator_id, live)
        self._run(self._resume(coordinator))
        self._start_timeouts()
        return coordinator

    async def _resume(self, coordinator: TransactionCoordinator) -> None:
        """Endings a previous owner left half-done, driven again in the background (the
        coordinator answers meanwhile)."""
        try:
            await coordinator.resume_endings()
        except BrokerError as exc:
            log.warning("coordinator %d: resuming endings: %s", coordinator.coordinator_id, exc)

    def _run(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- timeouts ---------------------------------------------------------------------
    def _start_timeouts(self) -> None:
        if self._timeouts is None or self._timeouts.done():
            self._timeouts = asyncio.get_running_loop().create_task(self._abort_timed_out())

    async def _abort_timed_out(self) -> None:
        while self.served:
            await asyncio.sleep(TIMEOUT_CHECK_SECONDS)
            for coordinator in list(self.served.values()):
                try:
                    aborted = await coordinator.abort_timed_out()
                    await coordinator.resume_endings()
                except BrokerError as exc:
                    log.warning("coordinator %d: timeouts: %s", coordinator.coordinator_id, exc)
                    continue
                if aborted:
                    log.info(
                        "coordinator %d aborted %d transactions past their timeout",
                        coordinator.coordinator_id,
                        len(aborted),
                    )

    # --- ownership changes and shutdown -------------------------------------------------
    async def unload_slots(self, slots: frozenset[int]) -> None:
        """The slots went to another broker: their coordinators close here."""
        cluster = self._cluster
        if cluster is None:
            return
        leaving = [
            tc_id
            for tc_id in self.served
            if cluster.slot_of(ASSIGN_TOPIC.partition(tc_id)) in slots
        ]
        await self._close(leaving)

    async def close(self) -> None:
        if self._timeouts is not None:
            self._timeouts.cancel()
        for task in list(self._background):
            task.cancel()
        await self._close(list(self.served))

    async def _close(self, coordinator_ids: list[int]) -> None:
        for tc_id in coordinator_ids:
            coordinator = self.served.pop(tc_id, None)
            if coordinator is None:
                continue
            try:
                await coordinator.close()
            except BrokerError as exc:
                log.warning("closing transaction coordinator %d: %s", tc_id, exc)
