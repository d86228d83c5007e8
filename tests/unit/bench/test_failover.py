"""The failover bench's two figures, from acknowledgement times."""

from __future__ import annotations

import pytest

from bench.failover import Acks


def test_back_after_waits_for_every_topic_and_ignores_earlier_sends() -> None:
    acks = Acks(2)
    acks.add(0, sent=9.9, acked=10.05)  # sent before the fault: does not count
    acks.add(0, sent=10.1, acked=10.2)
    assert acks.recovered_after(10.0) is None  # topic 1 has not answered yet
    acks.add(1, sent=10.0, acked=13.5)
    assert acks.recovered_after(10.0) == pytest.approx(3.5)


def test_longest_pause_sees_a_handover_after_an_early_acknowledgement() -> None:
    acks = Acks(2)
    for tenth in range(0, 100):  # topic 0 steady at 10 a second
        acks.add(0, sent=10 + tenth / 10, acked=10 + tenth / 10 + 0.01)
    # topic 1: acknowledged at once, then nothing for 2.4 s while its slot moved
    acks.add(1, sent=10.0, acked=10.05)
    acks.add(1, sent=10.1, acked=12.45)
    acks.add(1, sent=12.5, acked=12.55)
    assert acks.recovered_after(10.0) == pytest.approx(0.05)
    assert acks.longest_pause(10.0, 20.0) == pytest.approx(20.0 - 12.55)
    assert acks.longest_pause(10.0, 12.6) == pytest.approx(2.4)


def test_longest_pause_of_a_topic_never_acknowledged_is_the_whole_window() -> None:
    acks = Acks(1)
    assert acks.longest_pause(5.0, 8.0) == pytest.approx(3.0)
