"""The single writer's exact memory of a window: every key stored inside its window is
found, no other key is, whole buckets expire, and the compiled tables answer as the
pure-Python path does."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest

from dedup_broker.key_dedup import memory, window_table
from dedup_broker.key_dedup.memory import WindowKeys
from dedup_broker.key_dedup.window import now_ms
from dedup_broker.key_dedup.window_table import WINDOW_SLOT_BYTES, WindowTable

needs_compiled = pytest.mark.skipif(
    window_table.compiled_window is None, reason="the compiled window tables were not built"
)
WINDOW = 600_000


def _digests(label: str, count: int) -> list[bytes]:
    return [hashlib.sha256(b"%s %d" % (label.encode(), n)).digest()[:16] for n in range(count)]


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_compiled_and_python_tables_answer_alike(seed: int) -> None:
    rng = random.Random(seed)
    keys = _digests(f"seed {seed}", 6_000)
    compiled, python = WindowTable(0, compiled=True), WindowTable(0, compiled=False)
    for _ in range(40):  # grows from 1,024 slots several times on the way
        chosen = rng.sample(keys, rng.randrange(1, 400))
        offset = rng.randrange(0, 2**31 - 1)
        for table in (compiled, python):
            table.add(b"".join(chosen), offset)
    assert compiled.count == python.count
    for minimum in (0, 2**30, 2**31 - 2):
        asked = rng.sample(keys, 3_000)
        assert compiled.find(asked, minimum) == python.find(asked, minimum)


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_compiled_and_python_claims_answer_alike(seed: int) -> None:
    rng = random.Random(seed)
    keys = _digests(f"claims {seed}", 3_000)
    now = now_ms()
    windows = WindowKeys(WINDOW, compiled=True), WindowKeys(WINDOW, compiled=False)
    for _ in range(60):  # claims over two buckets; some of their writes lost
        chosen = b"".join(rng.choices(keys, k=rng.randrange(1, 300)))  # repeats inside
        anchor = now - rng.randrange(0, WINDOW // 2)
        answers = [w.claim(chosen, anchor) for w in windows]
        assert answers[0] == answers[1]
        if rng.random() < 0.3:
            for w in windows:
                w.free(chosen, answers[0][0])
    assert len(windows[0]) == len(windows[1])
    assert windows[0].anchors(keys, now) == windows[1].anchors(keys, now)


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_compiled), False])
def test_a_claim_names_held_keys_and_takes_the_others(compiled: bool) -> None:
    window = WindowKeys(WINDOW, compiled=compiled)
    now = now_ms()
    a, b, c, d = _digests("claim", 4)
    window.add_all([a], now - 1_000)  # stored
    anchor, held = window.claim(b"".join([a, b, c, b]), now)
    assert anchor == now
    assert held == [(0, now - 1_000), (3, now)]  # b: earlier in this claim
    _, held = window.claim(b"".join([c, d]), now)
    assert held == [(0, now)]  # c: held by the first claim's write
    window.free(d, now)  # its write was lost: new again
    window.free(a, now)  # held under another anchor: left as it is
    _, held = window.claim(b"".join([a, b, c, d]), now)
    assert held == [(0, now - 1_000), (1, now), (2, now)]
    old, _ = window.claim(_digests("late", 1)[0], now - WINDOW - 5)
    assert now - WINDOW < old <= now_ms() - WINDOW + 1  # a window passed counts from now
    assert len(window) == 5


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_compiled), False])
def test_every_key_of_the_window_is_found_and_no_other(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tables grow inline here, so the memory checked is settled tables' (growths on a
    # thread of their own: test_window_table.py).
    monkeypatch.setattr(window_table, "WINDOW_BACKGROUND_SLOTS", 1 << 30)
    # The clock at a fixed phase of the buckets: the entries split between buckets (and
    # the tables' sizes) the same way in every run.
    bucket = WINDOW // 2
    now = now_ms() // bucket * bucket + bucket // 2
    monkeypatch.setattr(memory, "now_ms", lambda: now)
    window = WindowKeys(WINDOW, compiled=compiled)
    held = _digests("held", 40_000)
    for start in range(0, len(held), 1_000):  # entries over the last window's buckets
        window.add_all(held[start : start + 1_000], now - WINDOW + 1_000 + start * 10)
    others = _digests("other", 40_000)
    assert window.anchors(others, now) == {}
    found = window.anchors(held, now)
    assert set(found) == set(held) and len(window) == 40_000
    assert found[held[-1]] == now - WINDOW + 1_000 + 39_000 * 10
    if compiled:  # 16-byte slots; a bucket sized from a busier one before it is emptier
        assert window.nbytes <= len(window) * WINDOW_SLOT_BYTES * 3


@needs_compiled
def test_a_growing_table_doubles_while_small_then_grows_by_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(window_table, "WINDOW_DOUBLING_SLOTS", 32_768)
    monkeypatch.setattr(window_table, "WINDOW_BACKGROUND_SLOTS", 1 << 30)
    table = WindowTable(0, compiled=True)
    keys = _digests("grow", 200_000)
    sizes = [1_024]
    for start in range(0, len(keys), 5_000):
        table.add(b"".join(keys[start : start + 5_000]), 1)
        slots = table.nbytes // WINDOW_SLOT_BYTES
        if slots != sizes[-1]:
            sizes.append(slots)
        # Never over three quarters full; at least three eighths while doubling, and
        # at least a half once growing by half.
        lowest = 0.45 if slots > 32_768 * 2 else 0.35
        assert table.count <= slots * 0.75 and (table.count >= slots * lowest or slots == 1_024)
    assert table.count == 200_000
    assert sizes[-1] > 32_768 * 2
    for before, after in itertools.pairwise(sizes):
        assert after >= before * 2 if before < 32_768 else after == before * 3 // 2


@needs_compiled
@pytest.mark.parametrize("seed", range(4))
def test_a_table_grown_in_place_keeps_its_held_keys_and_drops_the_freed(seed: int) -> None:
    rng = random.Random(seed)
    grow = window_table.compiled_window
    for slots in (4, 16, 100, 1_024, 5_000):
        table = bytearray(slots * WINDOW_SLOT_BYTES)
        keys = []
        for n in range(int(slots * 0.75)):
            key = bytearray(hashlib.sha256(f"{seed}-{slots}-{n}".encode()).digest()[:16])
            if n % 3 == 0:  # homes at the table's end: their probes wrap to its start
                key[6:8] = b"\xff\xff"
            keys.append(bytes(key))
        anchors = {key: rng.randrange(1_000) for key in keys}
        for key in keys:
            grow.add(table, key, anchors[key])
        freed = set(rng.sample(keys, len(keys) // 5))
        for key in freed:
            grow.free(table, key, anchors[key])
        wanted = slots * 3 // 2 + rng.randrange(50)
        assert grow.grow(table, wanted) == len(keys) - len(freed)
        assert len(table) == wanted * WINDOW_SLOT_BYTES
        assert dict(grow.find(table, keys, 0)) == {k: anchors[k] for k in keys if k not in freed}
        more = _digests(f"after-{seed}-{slots}", int(wanted * 0.75) - len(keys) + len(freed))
        grow.add(table, b"".join(more), 7)  # the grown table takes keys up to its fill
        assert dict(grow.find(table, more, 0)) == dict.fromkeys(more, 7)
    with pytest.raises(ValueError):
        grow.grow(bytearray(4 * WINDOW_SLOT_BYTES), 3)  # smaller
    with pytest.raises(TypeError):
        grow.grow(bytes(4 * WINDOW_SLOT_BYTES), 8)  # not a bytearray


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_compiled), False])
def test_a_key_stored_again_keeps_its_latest_anchor(compiled: bool) -> None:
    window = WindowKeys(WINDOW, compiled=compiled)
    now = now_ms()
    start = (now - 10_000) // window.bucket_ms * window.bucket_ms  # both in one bucket
    key = _digests("again", 1)
    window.add_all(key, start + 5_000)
    window.add_all(key, start + 1_000)  # replayed later, anchored earlier
    assert window.anchors(key, now) == {key[0]: start + 5_000}
    assert len(window) == 1


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_compiled), False])
def test_keys_leave_with_their_window_and_buckets_are_dropped_whole(compiled: bool) -> None:
    window = WindowKeys(WINDOW, compiled=compiled)
    now = now_ms()
    early, late = _digests("early", 100), _digests("late", 100)
    window.add_all(early, now - WINDOW + 10)
    window.add_all(late, now)
    assert set(window.anchors([*early, *late], now)) == {*early, *late}
    assert set(window.anchors([*early, *late], now + 10)) == set(late)  # exact to the ms
    window.add_all(_digests("never", 5), now - WINDOW)  # its window passed already
    assert len(window) == 200
    window.expire(now + WINDOW + window.bucket_ms)
    assert len(window) == 0 and window.nbytes == 0


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_compiled), False])
def test_a_bucket_is_sized_from_the_one_before(compiled: bool) -> None:
    window = WindowKeys(WINDOW, compiled=compiled)
    size = window.bucket_ms
    base = (now_ms() // size) * size
    window.add_all(_digests("first", 30_000), base - 1)
    window.add_all(_digests("second", 10), base)
    if compiled:
        assert window.nbytes >= 2 * 30_000 * WINDOW_SLOT_BYTES  # room made ahead


@needs_compiled
def test_bad_input_is_refused() -> None:
    table = WindowTable(0, compiled=True)
    with pytest.raises(ValueError):
        table.add(b"x" * 17, 0)
    with pytest.raises(ValueError):
        table.add(b"x" * 16, 2**32)
    with pytest.raises(ValueError):
        table.find([b"short"], 0)
    with pytest.raises(ValueError):
        WindowKeys(WINDOW).add_packed(b"x" * 15, now_ms())
    full = bytearray(2 * WINDOW_SLOT_BYTES)
    with pytest.raises(ValueError):
        window_table.compiled_window.add(full, b"".join(_digests("full", 3)), 0)
