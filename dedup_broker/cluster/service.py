"""The cluster as the broker sees it: which topics it may serve, who serves the others.

A broker serves a topic only while it owns the topic's slot. Slots come from the owners
group (``membership.py``); on assignment the slot's write fence is taken (Kafka fences
any earlier holder) before a topic of it loads; on revocation the broker unloads the
slot's topics (clients are told to go, writes settle, snapshots and cursors are stored)
before the group may hand the slot on.

A broker whose group session expires keeps serving its slots until the group says
whose they are (``lost_slots.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from dedup_broker.cluster.bundles import Bundle, BundleMap
from dedup_broker.cluster.directory import ClusterView, Directory
from dedup_broker.cluster.group_removal import GroupRemoval, GroupRemovalError, KafkaLink
from dedup_broker.cluster.lost_slots import LostSlots, earlier_seats
from dedup_broker.cluster.membership import (
    BrokerAddress,
    Membership,
    owners_group,
    owners_topic,
    rebalance_timeout_ms,
)
from dedup_broker.cluster.peer_requests import PeerRequests
from dedup_broker.cluster.peers import (
    Credentials,
    Endpoint,
    PeerState,
    PeerWatch,
    endpoint_of,
)
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.errors import OwnershipLostError, ServiceNotReadyError
from dedup_broker.storage.api import WriteFence

log = logging.getLogger(__name__)

JOIN_TIMEOUT_SECONDS = 30.0
LOOKUP_WAIT_SECONDS = 25.0
"""How long a lookup waits for a slot's new owner: below the official clients' default
operation timeout (30 s), so that the answer still reaches them."""
REBALANCE_WAIT_SECONDS = 3.0
"""How long a lookup waits for a rebalance to end before it names the slot's last owner."""
HANDOVER_WAIT_SECONDS = 10.0
"""How long clients of a slot that moved are held while its new owner is not known yet
(they are then told to go without an address, and look the topic up)."""
WATCH_SECONDS = 1.0
_RECHECK_FIRST_S, _RECHECK_MAX_S = 0.5, 5.0
"""Pauses between questions to the group after a slot's fence was lost to a Kafka failure."""
"""How often the group is read to follow its members (peers watched, dead ones removed)."""


FenceFactory = Callable[[int], Awaitable[WriteFence]]
SlotsHandler = Callable[[frozenset[int]], Coroutine[Any, Any, None]]


class NotOwnerError(ServiceNotReadyError):
    """The topic's bundle is owned by another broker: look it up again (HTTP: 307 to it)."""

    def __init__(self, topic: TopicName) -> None:
        super().__init__(f"topic {topic} is served by another broker (its bundle's owner)")
        self.topic = topic


@dataclass(frozen=True, slots=True)
class _SlotFenceWatch:
    """Tells the cluster when a slot's fence is lost."""

    cluster: Cluster
    slot: int
    fence: WriteFence

    def fence_lost(self, error: BaseException) -> None:
        self.cluster._fence_lost(self.slot, self.fence, error)


class Cluster:
    def __init__(
        self,
        config: BrokerConfig,
        acquire_fence: FenceFactory | None = None,
        peer_credentials: Credentials | None = None,
    ) -> None:
        self.config = config
        self._peer_credentials = peer_credentials
        """What this broker presents on the connections it keeps to the others' ports."""
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
        self.lost = LostSlots(rebalance_timeout_ms(config) / 1000, self._give_up)
        self.directory = Directory(config)
        self.membership: Membership | None = None
        self.owned: frozenset[int] = frozenset()
        self._tasks: set[asyncio.Future[None]] = set()
        self.peers: PeerWatch | None = None
        self.requests = PeerRequests(peer_credentials)
        """Requests to the other brokers (a transaction's ending on the topics they serve)."""
        self._removal = GroupRemoval(
            KafkaLink.of(config.kafka_connection()),
            owners_group(config.cluster_name),
            config.kafka_request_timeout_ms / 1000,
        )
        self._doomed: dict[Endpoint, set[str]] = {}
        """Members found dead, by their port: removed from the group until it lists none."""
        self._watching: asyncio.Task[None] | None = None
        self._joined = False
        """In the group: another member on this address is no predecessor of this one (a
        misconfigured address shared by two hosts), it is left alone."""

    @property
    def topic(self) -> str:
        return owners_topic(self.config.cluster_name)

    async def start(self, address: BrokerAddress, release: SlotsHandler) -> None:
        """Join the cluster as ``address``; ``release`` unloads the topics of slots this
        broker loses. Until the first assignment the broker serves nothing."""
        self.address = address
        self._release = release
        self.membership = Membership(
            self.config, address, self._assigned, self._revoked, self._lost
        )
        self.peers = PeerWatch(
            address,
            self.config.cluster_peer_timeout_millis / 1000,
            self._peer_down,
            self._peer_credentials,
        )
        # Watching first: a predecessor on this address (killed, restarted) must leave the
        # group before the group can take this broker in.
        self._watching = asyncio.ensure_future(self._watch())
        await self.membership.start(JOIN_TIMEOUT_SECONDS)
        self._joined = True

    async def leave(self) -> None:
        """Give every slot back (their topics unloaded first), then drop the fences."""
        if self.membership is not None:
            await self.membership.leave(self.config.broker_shutdown_timeout_ms / 1000)
        await self._revoked(self.lost.settle(frozenset()))
        await self._close_fences(frozenset(self._fences))

    async def close(self) -> None:
        """After :meth:`leave` (and the handovers): stop watching the group."""
        if self._watching is not None:
            self._watching.cancel()
        if self.peers is not None:
            self.peers.close()
        self.requests.close()
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
        fence.watch(_SlotFenceWatch(self, slot, fence))
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
        # assigns the slot to this very process, so it takes the fence again. A Kafka
        # that has just restarted may not describe the group for a while: asked again
        # until it does, or the group moves the slot (else nobody would serve it).
        delay = _RECHECK_FIRST_S
        while self._assigned_here(slot) and slot not in self.owned:
            try:
                view = await self.directory.view(max_age=0)
            except ServiceNotReadyError as exc:
                log.info("slot %d: who owns it is not known yet (%s); asking again", slot, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECHECK_MAX_S)
                continue
            if self._assigned_here(slot) and view.owners.get(slot) == self.address:
                self.owned = self.owned | {slot}
                log.info("slot %d: still assigned here; taking its fence again", slot)
            return

    def _assigned_here(self, slot: int) -> bool:
        return self.membership is not None and slot in self.membership.owned

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- who serves the others ---------------------------------------------------------
    async def owner_of(
        self, name: TopicName, wait_seconds: float = LOOKUP_WAIT_SECONDS
    ) -> BrokerAddress:
        """This broker's address if it owns the topic, else the live broker the group
        names; never a broker that does not answer.

        While the slot has no owner (a rebalance), or its owner is gone or frozen and not
        yet replaced, or the group still names this broker's address for a slot it does
        not hold (a description older than a revocation, or a predecessor on the same
        address not yet removed), the lookup waits for the new owner, as Pulsar's does:
        up to ``wait_seconds``, then ServiceNotReady (the client retries)."""
        return await self._live_owner(self.slot_of(name), wait_seconds)

    async def _live_owner(
        self, slot: int, wait_seconds: float, others_needed: bool = False
    ) -> BrokerAddress:
        """``others_needed``: give up at once when the group lists no other broker (no one
        is left to take the slot)."""
        deadline = time.monotonic() + wait_seconds
        settled = time.monotonic() + min(REBALANCE_WAIT_SECONDS, wait_seconds)
        max_age = 1.0
        reason = "no broker owns it yet (the cluster is rebalancing)"
        while True:
            if slot in self.owned:
                return self.address
            try:
                view = await self.directory.view(max_age)
                read = True
            except ServiceNotReadyError as exc:
                view, reason, read = ClusterView(), str(exc), False
            owner = view.owners.get(slot)
            if others_needed and read and not self._others_in(view):
                raise ServiceNotReadyError(f"slot {slot}: no other broker is in the cluster")
            if owner is not None:
                if owner.same_endpoint(self.address):
                    reason = "it is moving to this broker"
                elif not view.stable and time.monotonic() < settled:
                    reason = "the group is rebalancing"  # the slot may be leaving its owner
                elif await self._answers(owner):
                    return owner
                else:
                    reason = f"its owner {owner.service_url} does not answer"
            if time.monotonic() >= deadline:
                raise ServiceNotReadyError(f"slot {slot}: {reason}")
            await asyncio.sleep(0.2)
            max_age = 0.2

    async def _answers(self, broker: BrokerAddress) -> bool:
        return self.peers is None or await self.peers.answers(broker)

    async def new_owner(self, slot: int) -> BrokerAddress | None:
        """The broker a slot that left this one went to, once the group names it and it
        answers (``None`` if that takes longer than ``HANDOVER_WAIT_SECONDS``)."""
        try:
            owner = await self._live_owner(slot, HANDOVER_WAIT_SECONDS, others_needed=True)
        except ServiceNotReadyError:
            return None
        return None if owner.same_endpoint(self.address) else owner

    def _others_in(self, view: ClusterView) -> bool:
        return any(not b.same_endpoint(self.address) for b in view.members.values())

    # --- the other members: watched, and removed when gone --------------------------------
    async def _watch(self) -> None:
        while True:
            try:
                view = await self.directory.view(WATCH_SECONDS)
            except ServiceNotReadyError:
                view = None
            if view is not None and self.peers is not None:
                self.peers.follow(list(view.members.values()))
                await self._remove_dead(view)
            await asyncio.sleep(WATCH_SECONDS)

    def _peer_down(self, endpoint: Endpoint, state: PeerState) -> None:
        """A member's port refuses connections or does not answer: the members the group
        lists there now are removed (not those that join there later: a restart)."""
        members = self.directory.last.members
        doomed = {m for m, address in members.items() if endpoint_of(address) == endpoint}
        if doomed:
            self._doomed[endpoint] = self._doomed.get(endpoint, set()) | doomed
            log.warning(
                "broker at %s:%d is %s: removing it from the owners group", *endpoint, state.value
            )
            self._background(self._remove(doomed))

    async def _remove_dead(self, view: ClusterView) -> None:
        assert self.peers is not None
        down = set(self.peers.down())
        for endpoint in list(self._doomed):
            self._doomed[endpoint] &= set(view.members)
            if endpoint not in down or not self._doomed[endpoint]:
                del self._doomed[endpoint]
        predecessors = {
            member
            for member, address in view.members.items()
            if not self._joined
            and address.same_endpoint(self.address)
            and address.instance != self.address.instance
        }
        mine = self.membership.member_id() if self.membership is not None else None
        earlier = earlier_seats(view, self.address, mine)
        doomed = predecessors.union(earlier, *self._doomed.values())
        if doomed:
            await self._remove(doomed)

    async def _remove(self, members: set[str]) -> None:
        try:
            await self._removal.remove(sorted(members))
        except (GroupRemovalError, OSError, TimeoutError) as exc:
            log.warning("removing %s from the owners group failed: %s", sorted(members), exc)
            return
        log.info("removed %s from the owners group", sorted(members))
        self.directory.invalidate()

    async def view(self) -> ClusterView:
        return await self.directory.view()

    # --- group callbacks (on the loop) ----------------------------------------------
    async def _assigned(self, slots: frozenset[int]) -> None:
        self.owned = self.owned | slots
        self.directory.invalidate()
        self._give_up(self.lost.settle(slots))
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
        """Unloads the topics of slots this broker no longer owns, then drops their fences."""
        if not slots:
            return
        self.owned = self.owned - slots
        self.directory.invalidate()
        if self._release is not None:
            try:
                await self._release(slots)
            except Exception:
                log.exception("unloading slots %s failed", sorted(slots))
        await self._close_fences(slots)

    async def _lost(self, slots: frozenset[int]) -> None:
        self.lost.hold(slots)
        self.directory.invalidate()

    def _give_up(self, slots: frozenset[int]) -> None:
        """Slots that were on hold and are not this broker's: let go of them now."""
        if slots:
            self.owned = self.owned - slots
            self._background(self._revoked(slots))

    async def _close_fences(self, slots: frozenset[int]) -> None:
        fences = [self._fences.pop(slot) for slot in slots if slot in self._fences]
        await asyncio.gather(*(fence.close(5.0) for fence in fences), return_exceptions=True)
