"""The Redis side of key-window deduplication: claims, confirmations, markers.

Layout, per *scope* (a topic with all its partitions, or a namespace)::

    kd:{<tag>}:w          marker: present while Redis holds the scope's window
    kd:{<tag>}:c          hash: managed ledger -> last entry whose keys are in Redis
    kd:{<tag>}:b:<n>      hash, one per time bucket: 16-byte key -> "t:<publish ms>"
                          (stored) or "p:<claim ms>:<owner>" (in flight)

and for a scope with a single writer, whose memory decides and Redis holds a copy::

    kd:{<tag>}:v          marker
    kd:{<tag>}:c          checkpoints, as above
    kd:{<tag>}:k:<n>      list, one per time bucket: one packed value per confirmation
                          (per entry: publish ms, key count, the 16-byte keys)

``<tag>`` is a digest of the scope's id inside braces: a Redis Cluster hash tag, so all
keys of a scope live in one slot and the Lua scripts below (which touch several keys of
one scope at once) run on any cluster; different scopes spread over the nodes. Every
call is one script over a whole batch of keys: one round trip per batch, atomic.

Keys are fields of a few bucket hashes rather than one Redis key each: a claim of a
thousand keys is one ``HMGET`` per bucket and one ``HSET``, a confirmation one ``HSET``,
where a Redis key per message cost Redis a command (and an expiry) per key at every step,
three times the CPU. Bucket ``n`` holds what was written during broker time ``[n*B,
(n+1)*B)``, ``B`` half the window (at least 10 s); a claim reads the buckets that can hold
a key of the last window and writes the current one; whole buckets expire (or are
unlinked by a later confirmation) once no window reaches them.

Expiry is decided by the broker's clock, not Redis's: a stored key holds its publish
time, a claim its own time, and a script treats either as absent once ``publish +
window <= now`` (``claim + pending timeout <= now``).
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from redis.exceptions import RedisError

from dedup_broker.errors import RetriableError
from dedup_broker.key_dedup.redis_client import is_cluster_url, redis_client
from dedup_broker.key_dedup.scripts import CLAIM, CONFIRM, CONFIRM_PACKED, RELEASE, TAKE_OVER
from dedup_broker.key_dedup.window import KEY_BYTES

EXPIRY_MARGIN_MS = 60_000
"""Redis keeps a bucket this long past the last window that reaches it (clock
differences between Redis and the brokers)."""
CLOCK_SKEW_MS = 5_000
"""Brokers' clocks are taken to agree within this: each picks buckets by its own."""
MIN_BUCKET_MS = 10_000
RUN_HEADER = struct.Struct("<qI")
"""A packed confirmation's run of keys: the entry's publish ms and how many keys follow."""
READ_BATCH = 256
"""Packed confirmations read back per call (each a group's keys: a few thousand)."""


class KeyStoreUnavailableError(RetriableError):
    """Redis could not be reached or did not answer in time."""


class ScopeLostError(RetriableError):
    """Redis no longer holds this scope's window (restart without persistence, FLUSHALL)."""


def bucket_ms(window_ms: int) -> int:
    return max(window_ms // 2, MIN_BUCKET_MS)


@dataclass(frozen=True)
class ScopeKeys:
    """Redis key names of one scope."""

    scope_id: str
    single_writer: bool = False
    """The scope's memory decides and Redis keeps a packed copy (its own marker: a scope
    written in the other layout is rebuilt from the log, never read wrongly)."""

    @cached_property
    def tag(self) -> str:
        return hashlib.sha256(self.scope_id.encode()).hexdigest()[:16]

    @property
    def marker(self) -> str:
        return f"kd:{{{self.tag}}}:{'v' if self.single_writer else 'w'}"

    @property
    def checkpoints(self) -> str:
        return f"kd:{{{self.tag}}}:c"

    def bucket(self, number: int) -> str:
        kind = "k" if self.single_writer else "b"
        return f"kd:{{{self.tag}}}:{kind}:{number}"

    def current(self, now_ms: int, window_ms: int) -> tuple[str, int]:
        """The bucket written now, and when Redis may drop it (ms since the epoch)."""
        size = bucket_ms(window_ms)
        number = now_ms // size
        return self.bucket(number), (number + 1) * size + window_ms + (
            CLOCK_SKEW_MS + EXPIRY_MARGIN_MS
        )

    def claimable(self, now_ms: int, window_ms: int) -> tuple[list[str], int]:
        """The current bucket first, then the others a key may be in; and when Redis may
        drop the current one: what a claim reads and writes."""
        current, expire_at = self.current(now_ms, window_ms)
        others = [name for name in self.readable(now_ms, window_ms) if name != current]
        return [current, *others], expire_at

    def readable(self, now_ms: int, window_ms: int) -> list[str]:
        """Every bucket a key of the last window may be in (by any broker's clock)."""
        size = bucket_ms(window_ms)
        first = (now_ms - window_ms - CLOCK_SKEW_MS) // size
        last = (now_ms + CLOCK_SKEW_MS) // size
        return [self.bucket(n) for n in range(first, last + 1)]

    def obsolete(self, now_ms: int, window_ms: int) -> str:
        """The bucket just before the oldest any broker still reads."""
        size = bucket_ms(window_ms)
        return self.bucket((now_ms - window_ms - 2 * CLOCK_SKEW_MS) // size - 1)


class KeyStore:
    """One Redis client (one Redis, a Redis Cluster, or Sentinel's primary: ``redis_client``)
    shared by all scopes of a broker."""

    def __init__(
        self,
        url: str,
        timeout_seconds: float = 2.0,
        cluster: bool = False,
        observe: Callable[[str, float, bool], None] | None = None,
        connection: Mapping[str, str] | None = None,
    ) -> None:
        """``connection``: redis-py's TLS arguments (``BrokerConfig.redis_connection``);
        ``observe`` is told each round trip: its scope id, duration and success."""
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
        self._client: Any = redis_client(url, options, cluster=self.cluster)
        self._claim = self._client.register_script(CLAIM)
        self._confirm = self._client.register_script(CONFIRM)
        self._confirm_packed = self._client.register_script(CONFIRM_PACKED)
        self._release = self._client.register_script(RELEASE)
        self._take_over = self._client.register_script(TAKE_OVER)

    async def close(self) -> None:
        await self._client.aclose()

    async def _call(
        self, scope: ScopeKeys, script: Any, keys: Sequence[str | bytes], args: Sequence[object]
    ) -> Any:
        return await self._timed(scope, lambda: script(keys=list(keys), args=list(args)))

    async def _plain(self, scope: ScopeKeys, method: str, *args: object) -> Any:
        return await self._timed(scope, lambda: getattr(self._client, method)(*args))

    async def _timed(self, scope: ScopeKeys, call: Callable[[], Awaitable[Any]]) -> Any:
        """One round trip: counted, timed, and a Redis failure made a store error."""
        started = time.monotonic()
        self.round_trips += 1
        try:
            result = await call()
        except (RedisError, OSError) as exc:
            self.errors += 1
            if self._observe is not None:
                self._observe(scope.scope_id, time.monotonic() - started, False)
            raise KeyStoreUnavailableError(f"Redis at {self.url}: {exc}") from exc
        if self._observe is not None:
            self._observe(scope.scope_id, time.monotonic() - started, True)
        return result

    async def claim(
        self,
        scope: ScopeKeys,
        keys: Sequence[bytes],
        now_ms: int,
        window_ms: int,
        owner: bytes,
        pending_ttl_ms: int,
    ) -> dict[int, bytes]:
        """Claims every free key for ``owner``; answers the others, by their index in
        ``keys`` (a key absent from the answer is claimed now: under a load of new keys
        the answer is empty).

        ``b"t:<ms>"``: stored at that publish time, in the window. ``b"p:<owner>"``: a
        write holds it. Raises ScopeLostError when the marker is gone (nothing is claimed
        then).
        """
        if not keys:
            return {}
        buckets, expire_at = scope.claimable(now_ms, window_ms)
        result = await self._call(
            scope,
            self._claim,
            [scope.marker, *buckets],
            [
                now_ms,
                window_ms,
                pending_ttl_ms,
                b"p:%d:%s" % (now_ms, owner),
                expire_at,
                *keys,
            ],
        )
        if result is None or result is False:
            raise ScopeLostError(f"Redis lost key-deduplication scope {scope.scope_id}")
        values = (v if isinstance(v, bytes) else bytes(v) for v in result[1::2])
        return dict(zip(map(int, result[::2]), values, strict=True))

    async def read_window(
        self, scope: ScopeKeys, now_ms: int, window_ms: int
    ) -> AsyncIterator[tuple[int, memoryview]]:
        """A single writer's copy of the last window: (publish ms, packed 16-byte keys)
        per entry, ``READ_BATCH`` confirmations a call, so Redis is never held long."""
        for bucket in scope.readable(now_ms, window_ms):
            start = 0
            while True:
                values = await self._plain(scope, "lrange", bucket, start, start + READ_BATCH - 1)
                for value in values:
                    try:
                        runs = unpack_runs(value)
                    except ValueError as exc:  # not written by a broker: rebuild it
                        raise ScopeLostError(f"{bucket}: {exc}") from exc
                    for run in runs:
                        yield run
                if len(values) < READ_BATCH:
                    break
                start += READ_BATCH

    async def confirm(
        self,
        scope: ScopeKeys,
        runs: Sequence[tuple[list[bytes] | bytes, int]],
        now_ms: int,
        window_ms: int,
        checkpoints: dict[str, str],
    ) -> bool:
        """Stores keys of stored messages, given per entry as (keys, publish time) (a
        single writer's keys may come packed); advances checkpoints if the marker is
        there."""
        pairs: list[object] = []
        for field, value in checkpoints.items():
            pairs += [field, value]
        current, expire_at = scope.current(now_ms, window_ms)
        buckets = [scope.marker, scope.checkpoints, current, scope.obsolete(now_ms, window_ms)]
        if scope.single_writer:
            packed = pack_runs(runs)
            result = await self._call(
                scope, self._confirm_packed, buckets, [expire_at, len(checkpoints), packed, *pairs]
            )
            return bool(result)
        anchors: list[int] = []
        fields: list[bytes] = []
        for run, anchor in runs:
            keys = unpacked(run)
            if not keys:
                continue
            if anchors and anchors[-2] == anchor:
                anchors[-1] += len(keys)
            else:
                anchors += [anchor, len(keys)]
            fields += keys
        result = await self._call(
            scope,
            self._confirm,
            buckets,
            [expire_at, len(checkpoints), len(anchors) // 2, *pairs, *anchors, *fields],
        )
        return bool(result)

    async def release(
        self, scope: ScopeKeys, keys: Sequence[bytes], owner: bytes, now_ms: int, window_ms: int
    ) -> None:
        if keys:
            readable = scope.readable(now_ms, window_ms)
            await self._call(scope, self._release, readable, [owner, *keys])

    async def take_over(
        self,
        scope: ScopeKeys,
        key: bytes,
        old: bytes,
        owner: bytes,
        now_ms: int,
        window_ms: int,
        pending_ttl_ms: int,
    ) -> bool:
        """Replaces a dead owner's claim with ours, if no other write or stored copy
        holds the key."""
        buckets, expire_at = scope.claimable(now_ms, window_ms)
        done = await self._call(
            scope,
            self._take_over,
            buckets,
            [
                now_ms,
                window_ms,
                pending_ttl_ms,
                old,
                b"p:%d:%s" % (now_ms, owner),
                expire_at,
                key,
            ],
        )
        return bool(done)

    async def marker_present(self, scope: ScopeKeys) -> bool:
        return bool(await self._plain(scope, "exists", scope.marker))

    async def set_marker(self, scope: ScopeKeys) -> None:
        await self._plain(scope, "set", scope.marker, f"built {int(time.time() * 1000)}")

    async def set_checkpoints(self, scope: ScopeKeys, checkpoints: dict[str, str]) -> None:
        await self._plain(scope, "hset", scope.checkpoints, None, None, checkpoints)

    async def checkpoints(self, scope: ScopeKeys) -> dict[str, str]:
        raw = await self._plain(scope, "hgetall", scope.checkpoints)
        return {_text(k): _text(v) for k, v in raw.items()}

    async def forget_scope(self, scope: ScopeKeys) -> None:
        """Drops the marker and checkpoints: the next user rebuilds the window."""
        await self._plain(scope, "delete", scope.marker, scope.checkpoints)


def pack_runs(runs: Sequence[tuple[list[bytes] | bytes, int]]) -> bytes:
    """Keys per entry, (keys or packed keys, publish ms), as one value: per entry its
    publish ms and key count (``RUN_HEADER``), then the keys."""
    parts: list[bytes] = []
    for keys, anchor in runs:
        if isinstance(keys, bytes):
            if keys:
                parts += (RUN_HEADER.pack(anchor, len(keys) // KEY_BYTES), keys)
        elif keys:
            parts.append(RUN_HEADER.pack(anchor, len(keys)))
            parts += keys
    return b"".join(parts)


def unpacked(keys: list[bytes] | bytes) -> list[bytes]:
    if not isinstance(keys, bytes):
        return keys
    return [keys[at : at + KEY_BYTES] for at in range(0, len(keys), KEY_BYTES)]


def unpack_runs(value: bytes) -> list[tuple[int, memoryview]]:
    """``pack_runs``'s runs back: (publish ms, packed keys) each, no object per key."""
    view = memoryview(value)
    runs: list[tuple[int, memoryview]] = []
    at, header = 0, RUN_HEADER.size
    while at + header <= len(view):
        anchor, count = RUN_HEADER.unpack_from(view, at)
        at += header
        runs.append((anchor, view[at : at + 16 * count]))
        at += 16 * count
    if at != len(view):
        raise ValueError("a packed confirmation ends inside a run")
    return runs


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
