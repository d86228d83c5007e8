"""The lazy event and FIFO behave as ``asyncio.Event`` and ``deque`` do, allocating nothing
while idle."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.lazy import LazyDeque, LazyEvent


async def test_event_wakes_every_waiter_and_starts_afresh_after_clear() -> None:
    event = LazyEvent()
    assert not event.is_set()
    waiters = [asyncio.create_task(event.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    event.set()
    event.clear()  # those already woken still return
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert event._event is None
    again = asyncio.create_task(event.wait())
    await asyncio.sleep(0)
    assert not again.done()
    event.set()
    assert await again is True


async def test_event_set_at_start_waits_for_nothing() -> None:
    event = LazyEvent(True)
    assert event.is_set()
    assert await event.wait() is True
    assert event._event is None


async def test_cancelled_waiter_leaves_the_others_waiting() -> None:
    event = LazyEvent()
    cancelled = asyncio.create_task(event.wait())
    kept = asyncio.create_task(event.wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    event.set()
    assert await kept is True


def test_deque_keeps_fifo_order_and_drops_its_storage_when_empty() -> None:
    items: LazyDeque[int] = LazyDeque()
    assert not items and len(items) == 0 and list(items) == []
    items.append(2)
    items.append(3)
    items.appendleft(1)
    assert items and len(items) == 3 and list(items) == [1, 2, 3] and items[0] == 1
    del items[1]
    assert list(items) == [1, 3]
    assert items.popleft() == 1
    assert items.popleft() == 3
    assert not items and items._items is None
    items.append(4)
    del items[0]
    assert items._items is None
    items.append(5)
    items.clear()
    assert not items and items._items is None


def test_empty_deque_refuses_as_deque_does() -> None:
    items: LazyDeque[int] = LazyDeque()
    with pytest.raises(IndexError):
        items.popleft()
    with pytest.raises(IndexError):
        items[0]
    with pytest.raises(IndexError):
        del items[0]
