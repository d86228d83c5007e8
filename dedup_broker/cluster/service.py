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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from dedup_broker.cluster.bundles import Bundle, BundleMap
from dedup_broker.cluster.directory import ClusterView, Directory
from dedup_broker.cluster.membership import BrokerAddress, Membership, owners_topic
from dedup_broker.config import BrokerConfig
from dedup_broker.domain.names import TopicName
from dedup_broker.errors import OwnershipLostError, ServiceNotReadyError

log = logging.getLogger(__name__)

JOIN_TIMEOUT_SECONDS = 30.0


class Fence(Protocol):
    """A slot's write fence as the cluster handles it (storage makes them)."""

    async def close(self, timeout_seconds: float) -> None: ...


FenceFactory = Callable[[int], Awaitable[Fence]]
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
            config.advertised_address, config.broker_service_port, config.web_service_port
        )
        """Where clients reach this broker (the bound ports, once :meth:`start` knows them)."""
        self.bundles = BundleMap(
            config.default_number_of_namespace_bundles, config.cluster_ownership_slots
        )
        self._acquire_fence = acquire_fence
        self._fences: dict[int, Fence] = {}
        self._fencing: dict[int, asyncio.Task[Fence | None]] = {}
        self._release: SlotsHandler | None = None
        self.directory = Directory(config)
        self.membership: Membership | None = None
        self.owned: frozenset[int] = frozenset()

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

    async def fence_for(self, slot: int) -> Fence | None:
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

    async def _take_fence(self, slot: int) -> Fence | None:
        assert self._acquire_fence is not None
        try:
            fence = await self._acquire_fence(slot)
        finally:
            self._fencing.pop(slot, None)
        if slot not in self.owned:
            await fence.close(5.0)
            return None
        self._fences[slot] = fence
        return fence

    # --- who serves the others ---------------------------------------------------------
    async def owner_of(self, name: TopicName) -> BrokerAddress:
        """This broker's address if it owns the topic, else the owner the group names."""
        slot = self.slot_of(name)
        if slot in self.owned:
            return self.address
        owner = await self.directory.owner_of(slot)
        if owner == self.address:
            # The description is older than our own revocation: ask Kafka afresh.
            self.directory.invalidate()
            owner = await self.directory.owner_of(slot)
            if owner == self.address and slot not in self.owned:
                raise ServiceNotReadyError(f"slot {slot} is moving between brokers")
        return owner

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
