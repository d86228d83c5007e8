"""A lost group session: the slots stay served until the group's next assignment says which
are still this broker's, or until the hold's bound passes without one."""

from __future__ import annotations

import asyncio

from dedup_broker.cluster.directory import ClusterView
from dedup_broker.cluster.lost_slots import earlier_seats
from dedup_broker.cluster.membership import BrokerAddress
from dedup_broker.cluster.service import Cluster
from dedup_broker.config import BrokerConfig

HERE = BrokerAddress("127.0.0.1", 6650, 8080, instance="now")
EARLIER_HERE = BrokerAddress("127.0.0.1", 6650, 8080, instance="before")
THERE = BrokerAddress("127.0.0.1", 6651, 8081, instance="there")
HOLD_MS = 300


def cluster_with(released: list[frozenset[int]]) -> Cluster:
    cluster = Cluster(BrokerConfig(kafka_bootstrap_servers="127.0.0.1:9"))
    cluster.address = HERE
    cluster.lost.bound_seconds = HOLD_MS / 1000

    async def release(slots: frozenset[int]) -> None:
        released.append(slots)

    cluster._release = release
    return cluster


def test_the_slots_given_back_stay_served_and_the_others_are_let_go() -> None:
    released: list[frozenset[int]] = []

    async def scenario() -> None:
        cluster = cluster_with(released)
        await cluster._assigned(frozenset({1, 2, 3}))
        await cluster._lost(frozenset({1, 2, 3}))
        assert cluster.owned == {1, 2, 3}  # still served while the group decides
        await asyncio.sleep(HOLD_MS / 2000)
        await cluster._assigned(frozenset({1, 2}))
        assert cluster.owned == {1, 2}
        await asyncio.sleep(HOLD_MS / 1000 * 2)  # the hold's expiry must not fire
        assert cluster.owned == {1, 2}

    asyncio.run(scenario())
    assert released == [frozenset({3})]


def test_no_assignment_within_the_hold_lets_every_held_slot_go() -> None:
    released: list[frozenset[int]] = []

    async def scenario() -> None:
        cluster = cluster_with(released)
        await cluster._assigned(frozenset({4, 5}))
        await cluster._lost(frozenset({4, 5}))
        await asyncio.sleep(HOLD_MS / 1000 * 2)
        assert cluster.owned == frozenset()
        # A later assignment is a plain one.
        await cluster._assigned(frozenset({5}))
        assert cluster.owned == {5}

    asyncio.run(scenario())
    assert released == [frozenset({4, 5})]


def test_an_empty_assignment_after_the_loss_lets_every_held_slot_go() -> None:
    released: list[frozenset[int]] = []

    async def scenario() -> None:
        cluster = cluster_with(released)
        await cluster._assigned(frozenset({6}))
        await cluster._lost(frozenset({6}))
        await cluster._assigned(frozenset())
        await asyncio.sleep(0.05)
        assert cluster.owned == frozenset()

    asyncio.run(scenario())
    assert released == [frozenset({6})]


def test_this_process_s_earlier_seats_are_found_and_nobody_else() -> None:
    view = ClusterView(
        members={"old": HERE, "new": HERE, "predecessor": EARLIER_HERE, "peer": THERE}
    )
    assert earlier_seats(view, HERE, "new") == {"old"}
    assert earlier_seats(view, HERE, None) == set()  # rejoining: no id yet
