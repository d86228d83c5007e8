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
    _states: dict[bytes, KeyState] = field(default_factory=dict)
    futures: dict[bytes, asyncio.Future[bool]] = field(default_factory=dict)
    """Keys held by a write of this broker in flight: that write's outcome."""
    owned: set[bytes] = field(default_factory=set)
    """Keys claimed by this group."""
    unusual: set[bytes] = field(default_factory=set)
    """Keys the lookup found other than NEW (stored, or held by a write): a SEND with
    none of them (nor a key repeated in the group) is kept whole."""
    all_new: bool = False
    """Every message of the group has a key of its own, none repeated inside the group,
    and every key is NEW (the common case under a load of new keys): each SEND is kept
    whole, without a verdict per message, and the keys' states are written only when
    asked for (``states``) or when an answer turns out otherwise (``fill_states``)."""
    distinct: bool = False
    """Every message of the group has a key and no key comes twice in it."""
    _pending_new: list[bytes] = field(default_factory=list)

    @property
    def states(self) -> dict[bytes, KeyState]:
        """Every key's state as the lookup found it (and the group's writes updated it)."""
        if self._pending_new:
            self._states.update(dict.fromkeys(self._pending_new, KeyState.NEW))
            self._pending_new = []
        return self._states

    async def lookup(self, key_lists: list[list[bytes | None]]) -> None:
        """States of the group's keys: from local memory first, the rest from one claim.

        Set operations over the group, not a step per key: under a load of new keys
        nearly every key is asked, and neither memory knows it.
        """
        states, futures, scope = self.states, self.futures, self.scope
        unknown: set[bytes | None] = set().union(*key_lists)
        # One pass decides the common case: no key missing, none repeated in the group.
        distinct = not states and None not in unknown
        distinct = distinct and len(unknown) == sum(map(len, key_lists))
        self.distinct = distinct
        unknown.discard(None)
        unknown.difference_update(states)
        keys = cast(set[bytes], unknown)
        cache, in_flight = scope.cache, scope.in_flight
        cached = cache.known(keys)
        if distinct and not cached and in_flight.none_held(keys):
            self.all_new = True
            ask = list(keys)
            self._pending_new = ask
            await self.ask(ask)
            return
        self.all_new = False
        if cached:
            now, window, stored = now_ms(), self.policy.window_ms, scope.cache.stored
            for key in cached:
                if stored(key, now, window):
                    states[key] = KeyState.STORED
                    keys.discard(key)
                    self.unusual.add(key)
        held = scope.in_flight.held(keys)
        for key in held:
            states[key] = KeyState.IN_FLIGHT
            futures[key] = scope.in_flight.get(key)  # type: ignore[assignment]
        keys.difference_update(held)
        self.unusual |= held
        states.update(dict.fromkeys(keys, KeyState.NEW))
        await self.ask(list(keys))

    def fill_states(self) -> None:
        """Leaves the all-new fast path: every key of the group is NEW in ``states``
        (before an answer makes one of them otherwise)."""
        self.all_new = False
        _ = self.states

    def clear(self) -> None:
        """Forgets the states (to look the group up again)."""
        self._states.clear()
        self.unusual.clear()
        self.all_new = False
        self._pending_new = []

    def kept(self, kept_keys: list[bytes], used: set[bytes], repeated: set[bytes]) -> None:
        """Keys now held by an appended write; a later SEND of the group repeating one
        waits for that write's outcome."""
        used.update(kept_keys)
        self.states.update(dict.fromkeys(kept_keys, KeyState.IN_FLIGHT))
        if repeated:
            in_flight, futures = self.scope.in_flight.get, self.futures
            for key in repeated.intersection(kept_keys):
                future = in_flight(key)
                if future is not None:
                    futures[key] = future
        self.scope.kept += len(kept_keys)

    async def ask(self, ask: list[bytes]) -> None:
        """Keys neither memory knows: claimed in Redis (one round trip)."""
        await self.claim(ask)

    async def claim(self, ask: list[bytes]) -> None:
        if not ask:
            return
        scope, policy, states, futures = self.scope, self.policy, self._states, self.futures
        owned = self.owned
        # Other topics of the scope wait on us from now on.
        scope.in_flight.claim_new(ask)
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
        except asyncio.CancelledError:  # the topic closed: no write will settle them
            scope.in_flight.settle_all(ask, False)
            raise
        owned.update(ask)
        if taken:
            self.fill_states()
        for index, answer in taken.items():
            key = ask[index]
            owned.discard(key)
            if answer.startswith(b"t:"):
                states[key] = KeyState.STORED
                self.unusual.add(key)
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
                self.unusual.add(key)
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
        await self.ask(again)


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
