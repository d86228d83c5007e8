"""A slot's write fence lost to a Kafka failure, not to a takeover: the broker the group
still assigns the slot to serves it again, even when Kafka cannot describe the group for
a while after it restarted (else nobody would serve the slot until the next rebalance)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from dedup_broker.cluster import service as service_module
from dedup_broker.cluster.directory import ClusterView
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import OwnershipLostError, ServiceNotReadyError

SLOT = 3
HERE = BrokerAddress("127.0.0.1", 6650, 8080)
THERE = BrokerAddress("127.0.0.1", 6651, 8081)


@dataclass
class SlowGroup:
    """Describes the group only after ``refusals`` failed attempts."""

    owner: BrokerAddress
    refusals: int
    asked: int = 0

    async def view(self, max_age: float = 0.0) -> ClusterView:
        self.asked += 1
        if self.asked <= self.refusals:
            raise ServiceNotReadyError("the owners group cannot be described: timed out")
        return ClusterView([self.owner], {SLOT: self.owner})

    def invalidate(self) -> None:
        pass


@dataclass
class Assignment:
    owned: set[int] = field(default_factory=lambda: {SLOT})


class LostFence:
    def watch(self, callback: object) -> None:
        pass


async def lose_fence(owner: BrokerAddress, refusals: int) -> tuple[Cluster, SlowGroup]:
    cluster = Cluster(BrokerConfig(kafka_bootstrap_servers="127.0.0.1:9"))
    cluster.address = HERE
    group = SlowGroup(owner, refusals)
    cluster.directory = group  # type: ignore[assignment]
    cluster.membership = Assignment()  # type: ignore[assignment]
    released: list[frozenset[int]] = []

    async def release(slots: frozenset[int]) -> None:
        released.append(slots)

    cluster._release = release
    cluster.owned = frozenset({SLOT})
    fence = LostFence()
    cluster._fences[SLOT] = fence  # type: ignore[assignment]
    cluster._fence_lost(SLOT, fence, OwnershipLostError("INVALID_TXN_STATE"))  # type: ignore[arg-type]
    assert SLOT not in cluster.owned
    for _ in range(200):
        await asyncio.sleep(0.01)
        if group.asked > refusals:
            break
    await asyncio.sleep(0.01)
    assert released == [frozenset({SLOT})]
    return cluster, group


async def test_the_slot_is_served_again_once_kafka_describes_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service_module, "_RECHECK_FIRST_S", 0.001)
    cluster, group = await lose_fence(HERE, refusals=3)
    assert group.asked == 4
    assert SLOT in cluster.owned


async def test_a_slot_the_group_gave_to_another_broker_stays_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service_module, "_RECHECK_FIRST_S", 0.001)
    cluster, group = await lose_fence(THERE, refusals=1)
    assert group.asked == 2
    assert SLOT not in cluster.owned
