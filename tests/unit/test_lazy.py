"""The lazy event and FIFO behave as ``asyncio.Event`` and ``deque`` do, allocating nothing
while idle."""

from __future__ import annotations

import asyncio

import pytest

from dedup_broker.lazy import LazyDeque, LazyEvent, LazyLock


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


async def test_lock_excludes_and_serves_waiters_in_order() -> None:
    lock = LazyLock()
    assert not lock.locked()
    order: list[int] = []

    async def hold(index: int) -> None:
        async with lock:
            assert lock.locked()
            order.append(index)
            await asyncio.sleep(0.001)
            order.append(-index)

    await asyncio.gather(*(hold(i) for i in range(1, 5)))
    assert order == [1, -1, 2, -2, 3, -3, 4, -4]
    assert not lock.locked()
    assert lock._lock is None and lock._users == 0


async def test_lock_waiter_cancelled_leaves_holder_and_others_exact() -> None:
    lock = LazyLock()
    entered: list[str] = []
    release = asyncio.Event()

    async def hold(name: str, wait: bool) -> None:
        async with lock:
            entered.append(name)
            if wait:
                await release.wait()

    holder = asyncio.create_task(hold("holder", True))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(hold("cancelled", False))
    kept = asyncio.create_task(hold("kept", False))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    assert lock._users == 2  # the holder and the kept waiter
    release.set()
    await asyncio.gather(holder, kept)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert entered == ["holder", "kept"]
    assert lock._lock is None and lock._users == 0


async def test_lock_released_by_an_exception_inside() -> None:
    lock = LazyLock()
    with pytest.raises(ValueError):
        async with lock:
            raise ValueError("inside")
    assert not lock.locked() and lock._lock is None
    async with lock:
        assert lock.locked()
