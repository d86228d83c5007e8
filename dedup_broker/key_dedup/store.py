"""The Redis side of key-window deduplication: claims, confirmations, markers.

Layout, per *scope* (a topic with all its partitions, or a namespace)::

    kd:{<tag>}:m          marker: present while Redis holds the scope's window
    kd:{<tag>}:c          hash: managed ledger -> last entry whose keys are in Redis
    kd:{<tag>}:k:<hex>    one message key: "t:<publish ms>" (stored) or "p:<owner>" (in flight)

``<tag>`` is a digest of the scope's id inside braces: a Redis Cluster hash tag, so all
keys of a scope live in one slot and the Lua scripts below (which touch several keys of
one scope at once) run on any cluster; different scopes spread over the nodes. Every
call is one script over a whole batch of keys: one round trip per batch, atomic.

Expiry is decided by the broker's clock, not Redis's: a stored key holds its publish
time, and a claim treats it as absent once ``publish + window <= now``. Redis's own TTL
(the window plus a margin) only frees the memory.
"""

from __future__ import annotations

import hashlib
import time
from binascii import hexlify
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from dedup_broker.errors import RetriableError

EXPIRY_MARGIN_MS = 60_000
"""Redis keeps keys this long past their window, covering clock differences."""

CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local out = {}
for i = 2, #KEYS do
  if not redis.call('SET', KEYS[i], ARGV[3], 'NX', 'PX', ARGV[4]) then
    local v = redis.call('GET', KEYS[i])
    if v and string.sub(v, 1, 2) == 't:' and tonumber(string.sub(v, 3)) + window <= now then
      v = false
    end
    if v then
      out[#out + 1] = i - 2
      out[#out + 1] = v
    else
      redis.call('SET', KEYS[i], ARGV[3], 'PX', ARGV[4])
    end
  end
end
return out
"""
"""Claims every free key; answers (index, value) pairs for the keys it did not claim
only, so a group of new keys costs a short reply. A new key costs one command (``SET
NX``); only a key that exists is read."""

CONFIRM = """
local now = tonumber(ARGV[1])
local keep = tonumber(ARGV[2])
local pairs_count = tonumber(ARGV[3])
local run = 4 + 2 * pairs_count
local i = 3
while i <= #KEYS do
  local anchor = ARGV[run]
  local last = i + tonumber(ARGV[run + 1]) - 1
  local ttl = tonumber(anchor) + keep - now
  if ttl < 1 then ttl = 1 end
  local value = 't:' .. anchor
  for j = i, last do
    redis.call('SET', KEYS[j], value, 'PX', ttl)
  end
  i = last + 1
  run = run + 2
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for j = 0, pairs_count - 1 do
  redis.call('HSET', KEYS[2], ARGV[4 + 2 * j], ARGV[5 + 2 * j])
end
return 1
"""
"""Stores keys with their anchors, given as runs (anchor, how many keys): the keys of
one entry share its publish time."""

RELEASE = """
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"""

TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""


class KeyStoreUnavailableError(RetriableError):
    """Redis could not be reached or did not answer in time."""


class ScopeLostError(RetriableError):
    """Redis no longer holds this scope's window (restart without persistence, FLUSHALL)."""


@dataclass(frozen=True)
class ScopeKeys:
    """Redis key names of one scope."""

    scope_id: str

    @cached_property
    def tag(self) -> str:
        return hashlib.sha256(self.scope_id.encode()).hexdigest()[:16]

    @cached_property
    def _key_prefix(self) -> bytes:
        return f"kd:{{{self.tag}}}:k:".encode()

    @property
    def marker(self) -> str:
        return f"kd:{{{self.tag}}}:m"

    @property
    def checkpoints(self) -> str:
        return f"kd:{{{self.tag}}}:c"

    def key(self, digest: bytes) -> bytes:
        """Bytes, as Redis gets them: the client passes bytes on without encoding."""
        return self._key_prefix + hexlify(digest)


def is_cluster_url(url: str) -> bool:
    return url.startswith(("redis+cluster://", "rediss+cluster://"))


class KeyStore:
    """One Redis (or Redis Cluster) client shared by all scopes of a broker."""

    def __init__(
        self,
        url: str,
        timeout_seconds: float = 2.0,
        cluster: bool = False,
        observe: Callable[[float, bool], None] | None = None,
        connection: Mapping[str, str] | None = None,
    ) -> None:
        """``connection``: redis-py's TLS arguments (``BrokerConfig.redis_connection``)."""
        self.url = url
        self.cluster = cluster or is_cluster_url(url)
        self._observe = observe
        self.round_trips = 0
        self.errors = 0
        options: dict[str, Any] = {
            "socket_timeout": timeout_seconds,
            "socket_connect_timeout": timeout_seconds,
            **(connection or {}),
        }
        self._client: Any
        if self.cluster:
            plain = url.replace("+cluster://", "://", 1)
            self._client = RedisCluster.from_url(plain, **options)
        else:
            self._client = aioredis.Redis.from_url(url, **options)
        self._claim = self._client.register_script(CLAIM)
        self._confirm = self._client.register_script(CONFIRM)
        self._release = self._client.register_script(RELEASE)
        self._take_over = self._client.register_script(TAKE_OVER)

    async def close(self) -> None:
        await self._client.aclose()

    async def _call(self, script: Any, keys: Sequence[str | bytes], args: Sequence[object]) -> Any:
        return await self._timed(lambda: script(keys=list(keys), args=list(args)))

    async def _plain(self, method: str, *args: object) -> Any:
        return await self._timed(lambda: getattr(self._client, method)(*args))

    async def _timed(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """One round trip: counted, timed, and a Redis failure made a store error."""
        started = time.monotonic()
        self.round_trips += 1
        try:
            result = await call()
        except (RedisError, OSError) as exc:
            self.errors += 1
            if self._observe is not None:
                self._observe(time.monotonic() - started, False)
            raise KeyStoreUnavailableError(f"Redis at {self.url}: {exc}") from exc
        if self._observe is not None:
            self._observe(time.monotonic() - started, True)
        return result

    async def claim(
        self,
        scope: ScopeKeys,
        keys: Sequence[bytes],
        now_ms: int,
        window_ms: int,
        owner: bytes,
        pending_ttl_ms: int,
    ) -> list[bytes]:
        """Claims every free key for ``owner``; one answer per key, in order.

        ``b""``: claimed now. ``b"t:<ms>"``: stored at that publish time, in the window.
        ``b"p:..."``: another write holds it. Raises ScopeLostError when the marker is
        gone (nothing is claimed then).
        """
        if not keys:
            return []
        result = await self._call(
            self._claim,
            [scope.marker, *map(scope.key, keys)],
            [now_ms, window_ms, b"p:" + owner, pending_ttl_ms],
        )
        if result is None or result is False:
            raise ScopeLostError(f"Redis lost key-deduplication scope {scope.scope_id}")
        answers = [b""] * len(keys)
        for at in range(0, len(result), 2):
            value = result[at + 1]
            answers[int(result[at])] = value if isinstance(value, bytes) else bytes(value)
        return answers

    async def confirm(
        self,
        scope: ScopeKeys,
        items: Sequence[tuple[bytes, int]],
        now_ms: int,
        window_ms: int,
        checkpoints: dict[str, str],
    ) -> bool:
        """Stores keys of stored messages; advances checkpoints if the marker is there."""
        pairs: list[object] = []
        for field, value in checkpoints.items():
            pairs += [field, value]
        runs: list[int] = []
        for _, anchor in items:
            if runs and runs[-2] == anchor:
                runs[-1] += 1
            else:
                runs += [anchor, 1]
        result = await self._call(
            self._confirm,
            [scope.marker, scope.checkpoints, *(scope.key(k) for k, _ in items)],
            [now_ms, window_ms + EXPIRY_MARGIN_MS, len(checkpoints), *pairs, *runs],
        )
        return bool(result)

    async def release(self, scope: ScopeKeys, keys: Sequence[bytes], owner: bytes) -> None:
        if keys:
            await self._call(self._release, [scope.key(k) for k in keys], [b"p:" + owner])

    async def take_over(
        self, scope: ScopeKeys, key: bytes, old: bytes, owner: bytes, pending_ttl_ms: int
    ) -> bool:
        """Replaces a dead owner's claim with ours, if it is still that claim."""
        done = await self._call(
            self._take_over, [scope.key(key)], [old, b"p:" + owner, pending_ttl_ms]
        )
        return bool(done)

    async def marker_present(self, scope: ScopeKeys) -> bool:
        return bool(await self._plain("exists", scope.marker))

    async def set_marker(self, scope: ScopeKeys) -> None:
        await self._plain("set", scope.marker, f"built {int(time.time() * 1000)}")

    async def set_checkpoints(self, scope: ScopeKeys, checkpoints: dict[str, str]) -> None:
        await self._plain("hset", scope.checkpoints, None, None, checkpoints)

    async def checkpoints(self, scope: ScopeKeys) -> dict[str, str]:
        raw = await self._plain("hgetall", scope.checkpoints)
        return {_text(k): _text(v) for k, v in raw.items()}

    async def forget_scope(self, scope: ScopeKeys) -> None:
        """Drops the marker and checkpoints: the next user rebuilds the window."""
        await self._plain("delete", scope.marker, scope.checkpoints)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
