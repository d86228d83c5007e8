"""A large window table grows on a thread of its own while it goes on taking keys: every
answer meanwhile and after is the one a table that never grew gives (the pure-Python
path), keys a lost write freed stay freed whenever the growth read them, and a growth
on its own thread holds every key."""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any

import pytest

from dedup_broker.key_dedup import window_table
from dedup_broker.key_dedup.memory import WindowKeys
from dedup_broker.key_dedup.window import now_ms
from dedup_broker.key_dedup.window_table import WINDOW_SLOT_BYTES, WindowTable

pytestmark = pytest.mark.skipif(
    window_table.compiled_window is None, reason="the compiled window tables were not built"
)
WINDOW = 600_000
SMALL = 4_000
"""Slots from which the tables of these tests grow on a thread of their own."""


class HeldGrowths:
    """The compiled helper, whose growths start when the test says (and then end at
    once): the moments the growth thread reads a table and ends are the test's."""

    def __init__(self) -> None:
        self.compiled = window_table.compiled_window
        self.waiting: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)

    def regrow(self, table: bytearray, slots: int) -> list[Any]:
        growth: list[Any] = [table, slots, None]
        self.waiting.append(growth)
        return growth

    def regrown(self, growth: list[Any]) -> tuple[bytearray, int] | None:
        done: tuple[bytearray, int] | None = growth[2]
        return done

    def run(self) -> int:
        """Every growth started so far runs to its end."""
        started = len(self.waiting)
        for growth in self.waiting:
            handle = self.compiled.regrow(growth[0], growth[1])
            growth[2] = self.compiled.regrown(handle, True)
        self.waiting.clear()
        return started


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldGrowths:
    growths = HeldGrowths()
    monkeypatch.setattr(window_table, "WINDOW_BACKGROUND_SLOTS", SMALL)
    monkeypatch.setattr(window_table, "compiled_window", growths)
    return growths


def _digests(label: str, count: int) -> list[bytes]:
    return [hashlib.sha256(b"%s %d" % (label.encode(), n)).digest()[:16] for n in range(count)]


@pytest.mark.parametrize("seed", range(4))
def test_claims_during_growths_answer_as_a_table_that_never_grew(
    held: HeldGrowths, seed: int
) -> None:
    rng = random.Random(seed)
    grown, plain = WindowKeys(WINDOW, compiled=True), WindowKeys(WINDOW, compiled=False)
    anchor = now_ms()
    fresh = iter(_digests(f"claims {seed}", 60_000))
    claimed: list[bytes] = []
    growths = 0
    for step in range(120):
        keys = [next(fresh) for _ in range(rng.randrange(100, 600))]
        keys += rng.sample(claimed, min(len(claimed), rng.randrange(0, 120)))  # repeats
        rng.shuffle(keys)
        packed = b"".join(keys)
        answer = grown.claim(packed, anchor + step)
        assert answer == plain.claim(packed, anchor + step)
        if rng.random() < 0.1:  # a lost write: its new keys are new again
            new = b"".join(
                k for i, k in enumerate(keys) if i not in {h.position for h in answer[1]}
            )
            grown.free(new, answer[0])
            plain.free(new, answer[0])
        else:
            claimed.extend(keys)
        if rng.random() < 0.3:
            growths += held.run()
        assert len(grown) == len(plain)
    growths += held.run()
    grown.claim(b"", anchor)  # settles the last growth
    assert growths >= 3
    assert grown.anchors(claimed, now_ms()) == plain.anchors(claimed, now_ms())
    assert len(grown) == len(plain) == len(set(claimed))


@pytest.mark.parametrize("thread_read_first", [True, False])
def test_a_key_freed_while_its_table_grows_is_new_again(
    held: HeldGrowths, thread_read_first: bool
) -> None:
    table = WindowTable(3_000, compiled=True)  # 4,001 slots
    before, lost, taken = _digests("before", 2_900), _digests("lost", 80), _digests("taken", 2_500)
    table.add(b"".join(before), 1)
    table.add(b"".join(lost), 2)  # in the array the growth will read
    table.add(b"".join(taken[:100]), 1)  # no room: the table grows beside
    assert table.growing
    if thread_read_first:  # the growth read the old array before the write was lost
        held.run()
        table.free(b"".join(lost), 2)
        assert table.growing and table.find(lost, 0) == []
        table.add(b"".join(taken[100:2_000]), 1)
    else:
        table.add(b"".join(taken[100:2_000]), 1)
        table.free(b"".join(lost), 2)
        assert table.find(lost, 0) == []
        held.run()
    table.reserve(0)
    assert not table.growing
    assert table.find(lost, 0) == []
    table.add(b"".join(lost[:10]), 3)  # claimed again by a later write
    table.add(b"".join(taken[2_000:]), 1)
    assert dict(table.find(lost, 0)) == dict.fromkeys(lost[:10], 3)
    assert dict(table.find(before + taken, 0)) == dict.fromkeys(before + taken, 1)
    assert table.held == 5_410
    assert table.nbytes <= 5_410 * WINDOW_SLOT_BYTES * 3


def test_a_table_grows_on_its_thread_to_the_same_keys() -> None:
    """The compiled helper's own thread, which never takes the interpreter's lock."""
    table = WindowTable(0, compiled=True)
    keys = _digests("thread", 200_000)
    for start in range(0, len(keys), 10_000):
        table.add(b"".join(keys[start : start + 10_000]), start // 10_000)
    for _ in range(10_000):  # a growth of at most 16 MiB: milliseconds
        if not table.growing:
            break
        time.sleep(0.001)
        table.reserve(0)
    assert dict(table.find(keys, 0)) == {k: i // 10_000 for i, k in enumerate(keys)}
    assert table.held == 200_000


def test_regrow_places_held_keys_in_a_new_table_and_merge_adds_them() -> None:
    table = bytearray(1_024 * WINDOW_SLOT_BYTES)
    keys = _digests("regrow", 700)
    window_table.compiled_window.add(table, b"".join(keys), 5)
    freed = b"".join(keys[:100])
    assert window_table.compiled_window.free(table, freed, 5) == 100
    grown, kept = window_table.compiled_window.regrown(
        window_table.compiled_window.regrow(table, 4_096), True
    )
    assert kept == 600 and len(grown) == 4_096 * WINDOW_SLOT_BYTES
    assert dict(window_table.compiled_window.find(grown, keys, 0)) == dict.fromkeys(keys[100:], 5)
    into = bytearray(2_048 * WINDOW_SLOT_BYTES)
    window_table.compiled_window.add(into, b"".join(keys[:50]), 9)  # later than 5: kept
    window_table.compiled_window.add(into, b"".join(keys[600:]), 1)  # earlier: raised
    window_table.compiled_window.free(into, b"".join(keys[:10]), 9)
    added, reused = window_table.compiled_window.merge(into, grown)
    assert (added, reused) == (500, 0)
    found = dict(window_table.compiled_window.find(into, keys, 0))
    assert found == {**dict.fromkeys(keys[10:50], 9), **dict.fromkeys(keys[100:], 5)}
    with pytest.raises(ValueError):
        window_table.compiled_window.regrow(table, 10)  # fewer slots
    with pytest.raises(ValueError):
        window_table.compiled_window.merge(bytearray(WINDOW_SLOT_BYTES * 2), grown)  # no room
