"""The keys of one group of SENDs: their states from local memory first, the rest from one
claim (one Redis round trip for the whole group).

A NEW key the claim answers with nothing is this broker's now (``owned``) until its write
settles or the topic releases it. A key another write of this broker holds can be awaited
(``futures``); one another broker's write holds cannot.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from dedup_broker.key_dedup.sends import KeyDedupNotReadyError
from dedup_broker.key_dedup.store import KeyStoreUnavailableError, ScopeLostError
from dedup_broker.key_dedup.window import KeyDedupPolicy, KeyState, OnRedisUnavailable, now_ms

if TYPE_CHECKING:
    from dedup_broker.key_dedup.scope import KeyScope
    from dedup_broker.key_dedup.service import KeyDedupService


class ScopeRebuildingError(KeyDedupNotReadyError):
    """Redis lost the key window during a claim; it is being rebuilt from the log."""


@dataclass(eq=False)
class GroupKeys:
    scope: KeyScope
    policy: KeyDedupPolicy
    service: KeyDedupService
    owner: bytes
    """This topic load's claim owner (in Redis)."""
    states: dict[bytes, KeyState] = field(default_factory=dict)
    futures: dict[bytes, asyncio.Future[bool]] = field(default_factory=dict)
    """Keys held by a write of this broker in flight: that write's outcome."""
    owned: set[bytes] = field(default_factory=set)
    """Keys claimed by this group."""

    async def lookup(self, key_lists: list[list[bytes | None]]) -> None:
        """States of the group's keys: from local memory first, the rest from one claim.

        Set operations over the group, not a step per key: under a load of new keys
        nearly every key is asked, and neither memory knows it.
        """
        states, futures, scope = self.states, self.futures, self.scope
        unknown: set[bytes | None] = set().union(*key_lists)
        unknown.discard(None)
        unknown.difference_update(states)
        keys = cast(set[bytes], unknown)
        cached = scope.cache.known(keys)
        if cached:
            now, window, stored = now_ms(), self.policy.window_ms, scope.cache.stored
            for key in cached:
                if stored(key, now, window):
                    states[key] = KeyState.STORED
                    keys.discard(key)
        held = scope.in_flight.held(keys)
        for key in held:
            states[key] = KeyState.IN_FLIGHT
            futures[key] = scope.in_flight.get(key)  # type: ignore[assignment]
        keys.difference_update(held)
        states.update(dict.fromkeys(keys, KeyState.NEW))
        await self.claim(list(keys))

    async def claim(self, ask: list[bytes]) -> None:
        if not ask:
            return
        scope, policy, states, futures = self.scope, self.policy, self.states, self.futures
        owned = self.owned
        # Other topics of the scope wait on us from now on.
        scope.in_flight.claim_all(ask)
        service = self.service
        try:
            taken = await service.store.claim(
                scope.keys, ask, now_ms(), policy.window_ms, self.owner, service.pending_ttl_ms
            )
        except ScopeLostError:
            scope.in_flight.settle_all(ask, False)
            scope.lost()
            raise ScopeRebuildingError("Redis lost the key window; it is being rebuilt") from None
        except KeyStoreUnavailableError:
            if policy.on_redis_unavailable is OnRedisUnavailable.ACCEPT:
                service.accepted_without_redis += len(ask)
                owned.update(ask)
                return
            scope.in_flight.settle_all(ask, False)
            raise
        owned.update(ask)
        for index, answer in taken.items():
            key = ask[index]
            owned.discard(key)
            if answer.startswith(b"t:"):
                states[key] = KeyState.STORED
                scope.cache.add(key, int(answer[2:]))
                scope.in_flight.settle(key, True)
            elif answer[2:] == self.owner or (
                service.stale_owner(answer[2:])
                and await service.store.take_over(
                    scope.keys,
                    key,
                    answer,
                    self.owner,
                    now_ms(),
                    policy.window_ms,
                    service.pending_ttl_ms,
                )
            ):
                owned.add(key)
            else:  # another broker's write holds it: its outcome cannot be awaited here
                states[key] = KeyState.IN_FLIGHT
                futures.pop(key, None)
                scope.in_flight.settle(key, False)

    async def settle(self, keys: list[bytes]) -> None:
        """Keys whose writes settled since the lookup: stored, or to be claimed anew."""
        scope, states, futures = self.scope, self.states, self.futures
        again: list[bytes] = []
        for key in keys:
            future = futures.pop(key)
            if not future.cancelled() and future.result():
                states[key] = KeyState.STORED
            elif key in scope.in_flight:
                states[key] = KeyState.IN_FLIGHT
                futures[key] = scope.in_flight.get(key)  # type: ignore[assignment]
            else:
                states[key] = KeyState.NEW
                again.append(key)
        await self.claim(again)


def repeated_keys(key_lists: list[list[bytes | None]]) -> set[bytes]:
    """Keys found in more than one SEND of a group (set operations, not a loop per key):
    only their writes' outcomes are fetched for the group's later SENDs."""
    seen: set[bytes | None] = set()
    repeated: set[bytes | None] = set()
    for keys in key_lists:
        unique = set(keys)
        repeated |= seen & unique
        seen |= unique
    repeated.discard(None)
    return cast(set[bytes], repeated)
