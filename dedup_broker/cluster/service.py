"""The cluster as the broker sees it: which topics it may serve, who serves the others.

A broker serves a topic only while it owns the topic's slot. Slots come from the owners
group (``membership.py``); on assignment the slot's write fence is taken (Kafka fences
any earlier holder) before a topic of it loads; on revocation the broker unloads the
slot's topics (clients are told to go, writes settle, snapshots and cursors are stored)
before the group may hand the slot on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from dedup_broker.cluster.bundles import Bundle, BundleMap
from dedup_broker.cluster.directory import OWNER_WAIT_SECONDS, ClusterView, Directory
from dedup_broker.cluster.membership import BrokerAddress, Membership, owners_topic
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import OwnershipLostError, ServiceNotReadyError
from dedup_broker.storage.api import WriteFence

log = logging.getLogger(__name__)

JOIN_TIMEOUT_SECONDS = 30.0


FenceFactory = Callable[[int], Awaitable[WriteFence]]
SlotsHandler = Callable[[frozenset[int]], Coroutine[Any, Any, None]]


class NotOwnerError(ServiceNotReadyError):
    """The topic's bundle is owned by another broker: look it up again (HTTP: 307 to it)."""

    def __init__(self, topic: TopicName) -> None:
        super().__init__(f"topic {topic} is served by another broker (its bundle's owner)")
        self.topic = topic


class Cluster:
    def __init__(self, config: BrokerConfig, acquire_fence: FenceFactory | None = None) -> None:
        self.config = config
        self.address = BrokerAddress(
            config.advertised_address,
            config.broker_service_port or 0,
            config.web_service_port or 0,
            broker_port_tls=config.broker_service_port_tls,
            web_port_tls=config.web_service_port_tls,
        )
        """Where clients reach this broker (the bound ports, once :meth:`start` knows them)."""
        self.bundles = BundleMap(
            config.default_number_of_namespace_bundles, config.cluster_ownership_slots
        )
        self._acquire_fence = acquire_fence
        self._fences: dict[int, WriteFence] = {}
        self._fencing: dict[int, asyncio.Task[WriteFence | None]] = {}
        self._release: SlotsHandler | None = None
        self.directory = Directory(config)
        self.membership: Membership | None = None
        self.owned: frozenset[int] = frozenset()
        self._tasks: set[asyncio.Future[None]] = set()

    @property
    def topic(self) -> str:
        return owners_topic(self.config.cluster_name)

    async def start(self, address: BrokerAddress, release: SlotsHandler) -> None:
        """Join the cluster as ``address``; ``release`` unloads the topics of slots this
        broker loses. Until the first assignment the broker serves nothing."""
        self.address = address
        self._release = release
        self.membership = Membership(self.config, address, self._assigned, self._revoked)
        await self.membership.start(JOIN_TIMEOUT_SECONDS)

    async def leave(self) -> None:
        """Give every slot back (their topics unloaded first), then drop the fences."""
        if self.membership is not None:
            await self.membership.leave(self.config.broker_shutdown_timeout_ms / 1000)
        await self._close_fences(frozenset(self._fences))
        await self.directory.close()

    # --- what this broker serves -------------------------------------------------------
    def slot_of(self, name: TopicName) -> int:
        return self.bundles.slot_of(name)

    def bundle_of(self, name: TopicName) -> Bundle:
        return self.bundles.bundle_of(name)

    def owns_slot(self, slot: int) -> bool:
        return slot in self.owned

    def check_owned(self, name: TopicName) -> int:
        """The topic's slot if this broker owns it; ``NotOwnerError`` if not."""
        slot = self.slot_of(name)
        if slot not in self.owned:
            raise NotOwnerError(name)
        return slot

    async def fence_for(self, slot: int) -> WriteFence | None:
        """The slot's fence, once Kafka has fenced every earlier holder."""
        if self._acquire_fence is None:
            return None
        fence = self._fences.get(slot)
        if fence is not None:
            return fence
        task = self._fencing.get(slot)
        if task is None:
            task = asyncio.ensure_future(self._take_fence(slot))
            self._fencing[slot] = task
        fence = await asyncio.shield(task)
        if fence is None or slot not in self.owned:
            raise OwnershipLostError(f"slot {slot} is no longer owned by this broker")
        return fence

    async def _take_fence(self, slot: int) -> WriteFence | None:
        assert self._acquire_fence is not None
        try:
            fence = await self._acquire_fence(slot)
        finally:
            self._fencing.pop(slot, None)
        if slot not in self.owned:
            await fence.close(5.0)
            return None
        self._fences[slot] = fence
        fence.watch(lambda error: self._fence_lost(slot, fence, error))
        return fence

    def _fence_lost(self, slot: int, fence: WriteFence, error: BaseException) -> None:
        """Kafka says another holder took the slot's fence: serve nothing of the slot
        until the group gives it to this broker again."""
        if self._fences.get(slot) is not fence:
            return
        del self._fences[slot]
        self.owned = self.owned - {slot}
        self.directory.invalidate()
        log.error("slot %d: write fence lost (%s); its topics are unloaded", slot, error)
        self._background(self._after_fence_lost(slot))

    async def _after_fence_lost(self, slot: int) -> None:
        if self._release is not None:
            await self._release(frozenset({slot}))
        # A fence lost to a Kafka failure rather than to a takeover: the group still
        # assigns the slot to this very process, so it takes the fence again.
        try:
            view = await self.directory.view(max_age=0)
        except ServiceNotReadyError:
            return
        still_ours = self.membership is not None and slot in self.membership.owned
        if still_ours and view.owners.get(slot) == self.address:
            self.owned = self.owned | {slot}
            log.info("slot %d: still assigned here; taking its fence again", slot)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- who serves the others ---------------------------------------------------------
    async def owner_of(self, name: TopicName) -> BrokerAddress:
        """This broker's address if it owns the topic, else the owner the group names.

        The group may still name this broker's own address for a slot it does not hold:
        a description older than a revocation, or a predecessor on the same address that
        was killed and whose session has not expired yet. Both settle within the session
        timeout; meanwhile the lookup waits a little, then answers ServiceNotReady."""
        slot = self.slot_of(name)
        deadline = time.monotonic() + OWNER_WAIT_SECONDS
        while True:
            if slot in self.owned:
                return self.address
            owner = await self.directory.owner_of(slot)
            if not owner.same_endpoint(self.address):
                return owner
            if time.monotonic() >= deadline:
                raise ServiceNotReadyError(
                    f"slot {slot} is moving to this broker (a previous instance on this "
                    "address still holds it until its Kafka session expires)"
                )
            self.directory.invalidate()
            await asyncio.sleep(0.2)

    async def view(self) -> ClusterView:
        return await self.directory.view()

    # --- group callbacks (on the loop) ----------------------------------------------
    async def _assigned(self, slots: frozenset[int]) -> None:
        self.owned = self.owned | slots
        self.directory.invalidate()
        if self._acquire_fence is not None:
            # Fence now, so that a zombie of the previous owner stops as early as possible.
            ordered = sorted(slots)
            results = await asyncio.gather(
                *(self.fence_for(slot) for slot in ordered), return_exceptions=True
            )
            for slot, result in zip(ordered, results, strict=True):
                if isinstance(result, BaseException):
                    log.warning("slot %d: taking the write fence failed: %s", slot, result)

    async def _revoked(self, slots: frozenset[int]) -> None:
        self.owned = self.owned - slots
        self.directory.invalidate()
        if self._release is not None:
            try:
                await self._release(slots)
            except Exception:
                log.exception("unloading slots %s failed", sorted(slots))
        await self._close_fences(slots)

    async def _close_fences(self, slots: frozenset[int]) -> None:
        fences = [self._fences.pop(slot) for slot in slots if slot in self._fences]
        await asyncio.gather(*(fence.close(5.0) for fence in fences), return_exceptions=True)
