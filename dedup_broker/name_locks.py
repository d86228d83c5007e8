"""One asyncio lock per name, kept only while someone holds it or waits for it.

A lock per topic (opening a managed ledger, registering a schema) kept in a plain dict
forever grows with every name a long-running broker ever served; here a name's lock is
dropped as soon as its last user leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class NameLocks:
    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def __len__(self) -> int:
        """Names whose lock is held or awaited now."""
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        """``async with locks.hold(name):`` one holder of ``name`` at a time, in turn."""
        entry = self._locks.get(name)
        if entry is None:
            entry = self._locks[name] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[name]
