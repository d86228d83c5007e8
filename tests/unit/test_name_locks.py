"""NameLocks: one holder per name at a time, and nothing kept once a name is free."""

from __future__ import annotations

import asyncio

from dedup_broker.name_locks import NameLocks


def test_holders_of_one_name_take_turns_and_the_lock_is_dropped_after() -> None:
    async def scenario() -> tuple[list[str], int, int]:
        locks = NameLocks()
        order: list[str] = []
        inside = 0

        async def user(name: str, tag: str) -> None:
            nonlocal inside
            async with locks.hold(name):
                inside += 1
                assert inside == 1
                order.append(f"{tag}+")
                await asyncio.sleep(0.01)
                order.append(f"{tag}-")
                inside -= 1

        first = asyncio.create_task(user("a", "1"))
        await asyncio.sleep(0)
        during = len(locks)
        await asyncio.gather(first, user("a", "2"), user("a", "3"))
        return order, during, len(locks)

    order, during, after = asyncio.run(scenario())
    assert order == ["1+", "1-", "2+", "2-", "3+", "3-"]
    assert during == 1
    assert after == 0


def test_a_waiter_cancelled_leaves_nothing_behind() -> None:
    async def scenario() -> tuple[int, int]:
        locks = NameLocks()
        release = asyncio.Event()

        async def holder() -> None:
            async with locks.hold("t"):
                await release.wait()

        async def waiter() -> None:
            async with locks.hold("t"):
                raise AssertionError("a cancelled waiter must not get the lock")

        held = asyncio.create_task(holder())
        await asyncio.sleep(0)
        waiting = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        still = len(locks)
        release.set()
        await held
        return still, len(locks)

    assert asyncio.run(scenario()) == (1, 0)
