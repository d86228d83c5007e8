"""Where a leaving broker sends the clients of a slot (PIP-307): the slot's next owner
once the group names it; nobody, without waiting, when no other broker is left to take
it (a lone broker's shutdown must not wait for a successor that cannot come)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from dedup_broker.cluster.directory import ClusterView
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster
from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ServiceNotReadyError

SLOT = 5
HERE = BrokerAddress("127.0.0.1", 6650, 8080)
THERE = BrokerAddress("127.0.0.1", 6651, 8081)


@dataclass
class Group:
    """Answers with ``views`` in turn (the last one from then on); ``None`` fails a read."""

    views: list[ClusterView | None]
    asked: int = 0

    async def view(self, max_age: float = 0.0) -> ClusterView:
        view = self.views[min(self.asked, len(self.views) - 1)]
        self.asked += 1
        if view is None:
            raise ServiceNotReadyError("the owners group cannot be described: timed out")
        return view


def leaving(group: Group) -> Cluster:
    cluster = Cluster(BrokerConfig(kafka_bootstrap_servers="127.0.0.1:9"))
    cluster.address = HERE
    cluster.directory = group  # type: ignore[assignment]
    return cluster


def test_a_lone_broker_gives_up_at_the_first_reading_of_the_group() -> None:
    alone = ClusterView(stable=False, members={"m-here": HERE})
    empty = ClusterView(stable=False)
    for view in (alone, empty):
        group = Group([view])
        assert asyncio.run(leaving(group).new_owner(SLOT)) is None
        assert group.asked == 1


def test_the_new_owner_is_waited_for_while_another_broker_is_in_the_group() -> None:
    rebalancing = ClusterView([THERE], {}, stable=False, members={"m-there": THERE})
    settled = ClusterView([THERE], {SLOT: THERE}, stable=True, members={"m-there": THERE})
    group = Group([rebalancing, rebalancing, settled])
    assert asyncio.run(leaving(group).new_owner(SLOT)) == THERE
    assert group.asked == 3


def test_a_failed_reading_is_not_taken_for_an_empty_group() -> None:
    settled = ClusterView([THERE], {SLOT: THERE}, stable=True, members={"m-there": THERE})
    group = Group([None, settled])
    assert asyncio.run(leaving(group).new_owner(SLOT)) == THERE
    assert group.asked == 2
