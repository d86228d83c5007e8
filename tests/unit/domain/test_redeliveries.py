"""A subscription's redelivery counts and replay set: empty until first used, never
shared between subscriptions once written."""

from __future__ import annotations

from dedup_broker.domain.redeliveries import Redeliveries
from dedup_broker.storage.api import Position


def test_counts_belong_to_one_subscription() -> None:
    first, second = Redeliveries(), Redeliveries()
    first.count([Position(1, 0), Position(1, 0), Position(1, 1)])
    assert first.counts == {Position(1, 0): 2, Position(1, 1): 1}
    assert second.counts == {}
    assert Redeliveries().counts == {}


def test_acknowledgements_drop_counts_and_replay() -> None:
    redeliveries = Redeliveries()
    assert not redeliveries.waiting()
    redeliveries.count([Position(1, 0), Position(1, 1), Position(2, 0)])
    redeliveries.replay.update([Position(1, 0), Position(1, 1), Position(2, 0)])
    assert redeliveries.waiting()
    redeliveries.acknowledged(Position(2, 0))
    redeliveries.acknowledged_up_to(Position(1, 0))
    assert redeliveries.counts == {Position(1, 1): 1}
    assert redeliveries.replay == {Position(1, 1)}


def test_clear_forgets_everything_and_counts_again() -> None:
    redeliveries = Redeliveries()
    redeliveries.count([Position(3, 4)])
    redeliveries.replay.add(Position(3, 4))
    redeliveries.clear()
    assert not redeliveries.waiting()
    assert redeliveries.counts == {}
    redeliveries.count([Position(3, 5)])
    assert redeliveries.counts == {Position(3, 5): 1}
    assert Redeliveries().counts == {}
