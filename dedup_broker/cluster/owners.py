"""Which broker serves a topic, for processes that are not brokers (deletion workers,
the doctor): the bundle map and the owners group's description, nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from dedup_broker.cluster.bundles import BundleMap
from dedup_broker.cluster.directory import Directory
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName


class OwnerState(Enum):
    SERVED = "served"
    """A live broker owns the topic's bundle."""
    MOVING = "moving"
    """Brokers are up but none owns it right now (a rebalance): ask again later."""
    NO_BROKERS = "no-brokers"
    """No broker is running: nobody holds the topic open."""


@dataclass(frozen=True)
class TopicOwner:
    state: OwnerState
    broker: BrokerAddress | None = None


class TopicOwners:
    def __init__(self, config: BrokerConfig) -> None:
        self._bundles = BundleMap(
            config.default_number_of_namespace_bundles, config.cluster_ownership_slots
        )
        self._directory = Directory(config)

    async def owner_of(self, name: TopicName) -> TopicOwner:
        view = await self._directory.view(max_age=0.5)
        if not view.brokers:
            return TopicOwner(OwnerState.NO_BROKERS)
        owner = view.owners.get(self._bundles.slot_of(name))
        if owner is None:
            return TopicOwner(OwnerState.MOVING)
        return TopicOwner(OwnerState.SERVED, owner)

    async def brokers(self) -> list[BrokerAddress]:
        return (await self._directory.view(max_age=0.5)).brokers

    async def summary(self) -> dict[str, object]:
        """Live brokers, the slots each owns, and slots nobody owns (for the doctor)."""
        view = await self._directory.view(max_age=0)
        slots: dict[str, list[int]] = {b.broker_id: [] for b in view.brokers}
        for slot, owner in sorted(view.owners.items()):
            slots.setdefault(owner.broker_id, []).append(slot)
        unowned = sorted(set(range(self._bundles.slots)) - set(view.owners))
        return {
            "brokers": [b.service_url for b in view.brokers],
            "slotsByBroker": slots,
            "unownedSlots": unowned if view.brokers else [],
        }

    async def close(self) -> None:
        await self._directory.close()
