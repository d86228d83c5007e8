"""An event, a FIFO and a lock that cost almost nothing while nobody uses them.

Every loaded topic carries a few events, queues and locks (its managed ledger's append
pipeline and ledger list, producers waiting for exclusive access, key deduplication's send
queue, deduplication's snapshots) that an idle topic never touches. ``asyncio.Event`` and
``collections.deque`` each allocate a 760-byte deque up front and an ``asyncio.Lock`` is
two allocations of 88 bytes, which made these idle structures a large share of an idle
topic's memory; these stand-ins allocate the real thing only while it is in use.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Generic, Literal, TypeVar

T = TypeVar("T")


class LazyEvent:
    """``asyncio.Event`` whose waiters' event exists only while someone waits.

    ``set`` wakes the waiters and drops their event (they hold it until they return), so
    a later ``clear`` and ``wait`` start a fresh one: the same behaviour as one event.
    """

    __slots__ = ("_event", "_value")

    def __init__(self, value: bool = False) -> None:
        self._value = value
        self._event: asyncio.Event | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        self._value = True
        event, self._event = self._event, None
        if event is not None:
            event.set()

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> Literal[True]:
        if self._value:
            return True
        if self._event is None:
            self._event = asyncio.Event()
        return await self._event.wait()


class LazyDeque(Generic[T]):
    """The FIFO subset of ``collections.deque``, holding a real deque only while it has
    items: an empty one is a single pointer."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[T] | None = None

    def __len__(self) -> int:
        return 0 if self._items is None else len(self._items)

    def __bool__(self) -> bool:
        return self._items is not None

    def __iter__(self) -> Iterator[T]:
        return iter(()) if self._items is None else iter(self._items)

    def __getitem__(self, index: int) -> T:
        if self._items is None:
            raise IndexError("deque index out of range")
        return self._items[index]

    def __delitem__(self, index: int) -> None:
        if self._items is None:
            raise IndexError("deque index out of range")
        del self._items[index]
        if not self._items:
            self._items = None

    def append(self, item: T) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)

    def appendleft(self, item: T) -> None:
        if self._items is None:
            self._items = deque()
        self._items.appendleft(item)

    def popleft(self) -> T:
        items = self._items
        if items is None:
            raise IndexError("pop from an empty deque")
        item = items.popleft()
        if not items:
            self._items = None
        return item

    def clear(self) -> None:
        self._items = None


class LazyLock:
    """``async with`` lock whose ``asyncio.Lock`` exists only while held or waited for.

    ``_users`` counts the holder and the waiters; the real lock is dropped when it falls
    to zero, so a later ``async with`` starts a fresh one: the same behaviour as one lock.
    """

    __slots__ = ("_lock", "_users")

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None
        self._users = 0

    def locked(self) -> bool:
        return self._lock is not None and self._lock.locked()

    async def __aenter__(self) -> None:
        lock = self._lock
        if lock is None:
            lock = self._lock = asyncio.Lock()
        self._users += 1
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: not acquired
            self._leave()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        lock = self._lock
        assert lock is not None, "released a lock that is not held"
        lock.release()
        self._leave()

    def _leave(self) -> None:
        self._users -= 1
        if not self._users:
            self._lock = None
