"""Key-window deduplication: policies, message keys and verdicts, with no I/O.

A message's *key* is a 16-byte digest of what identifies the event: a named property,
the partition key, or the payload itself (SHA-256, as SQS's content-based
deduplication). The broker remembers keys of stored messages for a sliding window
anchored on the stored copy's publish time and drops repeats that arrive before the
window has passed. Everything here is pure so it can be tested without servers; the
Redis store and the publish path build on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from dedup_broker.errors import PermanentError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import SingleMessage, split_batch
from dedup_broker.protocol.framing import parse_message

KEY_BYTES = 16
"""Digest bytes kept per key: 128 bits make collisions negligible at any realistic rate."""

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_WINDOW = re.compile(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*")
MAX_WINDOW_MS = 30 * 86_400_000


def now_ms() -> int:
    """Wall-clock milliseconds: windows are measured against publish times."""
    return int(time.time() * 1000)


class InvalidKeyDedupPolicyError(PermanentError):
    """A keyDeduplication policy is malformed (bad key source, window or scope)."""


class KeySourceKind(Enum):
    CONTENT = "content"
    PARTITION_KEY = "partitionKey"
    PROPERTY = "property"


@dataclass(frozen=True)
class KeySource:
    kind: KeySourceKind
    property_name: str = ""

    @classmethod
    def parse(cls, text: str) -> KeySource:
        if text == KeySourceKind.CONTENT.value:
            return cls(KeySourceKind.CONTENT)
        if text == KeySourceKind.PARTITION_KEY.value:
            return cls(KeySourceKind.PARTITION_KEY)
        if text.startswith("property:") and len(text) > len("property:"):
            return cls(KeySourceKind.PROPERTY, text[len("property:") :])
        raise InvalidKeyDedupPolicyError(
            f"keySource must be content, partitionKey or property:<name>, got {text!r}"
        )

    def __str__(self) -> str:
        if self.kind is KeySourceKind.PROPERTY:
            return f"property:{self.property_name}"
        return str(self.kind.value)


def parse_window(value: object) -> int:
    """``"90s"``, ``"5m"``, ``"2h"``, ``"7d"``, ``"250ms"`` or a number of ms -> milliseconds."""
    if isinstance(value, bool):
        raise InvalidKeyDedupPolicyError(f"window must be a duration, got {value!r}")
    if isinstance(value, int):
        ms = value
    else:
        match = _WINDOW.fullmatch(str(value))
        if match is None:
            raise InvalidKeyDedupPolicyError(
                f"window must look like 250ms, 30s, 5m, 2h or 7d, got {value!r}"
            )
        ms = int(match.group(1)) * _UNITS_MS[match.group(2) or "ms"]
    if not 0 < ms <= MAX_WINDOW_MS:
        raise InvalidKeyDedupPolicyError(f"window must be > 0 and at most 30d, got {value!r}")
    return ms


def format_window(ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        if ms % _UNITS_MS[unit] == 0:
            return f"{ms // _UNITS_MS[unit]}{unit}"
    return f"{ms}ms"


class Scope(Enum):
    TOPIC = "topic"
    NAMESPACE = "namespace"


class OnRedisUnavailable(Enum):
    REJECT = "reject"
    """Retriable errors while Redis cannot be reached: no duplicate slips in."""
    ACCEPT = "accept"
    """Decide from the broker's local knowledge only: available, duplicates possible."""


@dataclass(frozen=True)
class KeyDedupPolicy:
    enabled: bool = False
    key_source: KeySource = KeySource(KeySourceKind.CONTENT)
    window_ms: int = 300_000
    scope: Scope = Scope.TOPIC
    on_redis_unavailable: OnRedisUnavailable = OnRedisUnavailable.REJECT

    @classmethod
    def from_json(cls, data: Any, defaults: KeyDedupPolicy | None = None) -> KeyDedupPolicy:
        """A policy from its admin JSON; fields left out come from ``defaults``."""
        base = defaults or cls()
        if not isinstance(data, dict):
            raise InvalidKeyDedupPolicyError("the keyDeduplication policy must be a JSON object")
        known = {"enabled", "keySource", "window", "scope", "onRedisUnavailable"}
        unknown = set(data) - known
        if unknown:
            raise InvalidKeyDedupPolicyError(f"unknown keyDeduplication fields {sorted(unknown)}")
        policy = base
        if "enabled" in data:
            if not isinstance(data["enabled"], bool):
                raise InvalidKeyDedupPolicyError("enabled must be true or false")
            policy = replace(policy, enabled=data["enabled"])
        if "keySource" in data:
            policy = replace(policy, key_source=KeySource.parse(str(data["keySource"])))
        if "window" in data:
            policy = replace(policy, window_ms=parse_window(data["window"]))
        if "scope" in data:
            policy = replace(policy, scope=_enum(Scope, data["scope"], "scope"))
        if "onRedisUnavailable" in data:
            policy = replace(
                policy,
                on_redis_unavailable=_enum(
                    OnRedisUnavailable, data["onRedisUnavailable"], "onRedisUnavailable"
                ),
            )
        return policy

    def to_json(self) -> dict[str, object]:
        return {
            "enabled": self.enabled,
            "keySource": str(self.key_source),
            "window": format_window(self.window_ms),
            "scope": self.scope.value,
            "onRedisUnavailable": self.on_redis_unavailable.value,
        }


def _enum(kind: type[Scope] | type[OnRedisUnavailable], value: object, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidKeyDedupPolicyError(
            f"{name} must be one of {allowed}, got {value!r}"
        ) from None


# --- keys ---------------------------------------------------------------------------
def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:KEY_BYTES]


def message_key(source: KeySource, message: SingleMessage) -> bytes | None:
    """The key of one message, or None when it has none (it is then stored unchecked)."""
    return message_keys(source, [message])[0]


def message_keys(source: KeySource, messages: list[SingleMessage]) -> list[bytes | None]:
    """The key of every message of an entry, in order; the key source is decided once."""
    if source.kind is KeySourceKind.CONTENT:
        return [_digest(m.payload) for m in messages]
    if source.kind is KeySourceKind.PARTITION_KEY:
        return [_partition_key(m.metadata) for m in messages]
    return [_property_key(m.metadata, source.property_name) for m in messages]


def _partition_key(meta: pb.SingleMessageMetadata) -> bytes | None:
    if not meta.HasField("partition_key") or meta.null_partition_key:
        return None
    return _digest(b"k" + meta.partition_key.encode("utf-8"))


def _property_key(meta: pb.SingleMessageMetadata, name: str) -> bytes | None:
    for prop in meta.properties:
        if prop.key == name:
            return _digest(b"p" + prop.value.encode("utf-8"))
    return None


def checkable(metadata: pb.MessageMetadata) -> bool:
    """Entries whose messages can be keyed: not encrypted, not a chunk of a larger message."""
    if metadata.encryption_keys:
        return False
    chunks = metadata.num_chunks_from_msg if metadata.HasField("num_chunks_from_msg") else 1
    return chunks <= 1


def entry_messages(entry: bytes) -> tuple[pb.MessageMetadata, list[SingleMessage] | None]:
    """An entry's metadata and messages; None for messages that cannot be keyed."""
    parsed = parse_message(entry)
    if not checkable(parsed.metadata) or parsed.metadata.HasField("marker_type"):
        return parsed.metadata, None
    return parsed.metadata, split_batch(parsed.metadata, parsed.payload)


def stored_keys(entry: bytes, source: KeySource) -> list[bytes]:
    """Keys of a stored entry, as the publish path computed them when it wrote it."""
    _, messages = entry_messages(entry)
    if messages is None:
        return []
    keys = (message_key(source, m) for m in messages)
    return [k for k in keys if k is not None]


# --- verdicts -------------------------------------------------------------------------
class KeyState(Enum):
    """What the store (or the broker's own memory) says about a key."""

    NEW = "new"
    """Unknown, now claimed for this write."""
    STORED = "stored"
    """A stored message has it and its window has not passed."""
    IN_FLIGHT = "in-flight"
    """Claimed by a write whose outcome is not known yet."""


class MessageVerdict(Enum):
    KEEP = "keep"
    DROP = "drop"
    WAIT = "wait"
    UNCHECKED = "unchecked"


def verdicts(keys: list[bytes | None], states: dict[bytes, KeyState]) -> list[MessageVerdict]:
    """One verdict per message of an entry, in order.

    The first message with a NEW key keeps it; a later message of the same entry with
    the same key is a repeat (the entry is stored or lost as a whole). A key in flight
    elsewhere makes the message WAIT: its fate depends on that other write.
    """
    out: list[MessageVerdict] = []
    seen: set[bytes] = set()
    for key in keys:
        if key is None:
            out.append(MessageVerdict.UNCHECKED)
            continue
        if key in seen:
            out.append(MessageVerdict.DROP)
            continue
        seen.add(key)
        state = states.get(key, KeyState.IN_FLIGHT)
        if state is KeyState.NEW:
            out.append(MessageVerdict.KEEP)
        elif state is KeyState.STORED:
            out.append(MessageVerdict.DROP)
        else:
            out.append(MessageVerdict.WAIT)
    return out


# --- the broker's own memory of keys ---------------------------------------------------
class LocalKeyCache:
    """Recently stored keys with their anchors (publish times), most recent last.

    Only keys of stored messages enter it, so a hit is always a true repeat while the
    window lasts: most repeats are answered without asking Redis.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[bytes, int] = OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: bytes, anchor_ms: int) -> None:
        self.add_all((key,), anchor_ms)

    def add_all(self, keys: Iterable[bytes], anchor_ms: int) -> None:
        """Keys of one stored entry (one anchor), the oldest evicted past capacity."""
        if self.capacity <= 0:
            return
        known, capacity = self._keys, self.capacity
        for key in keys:
            old = known.get(key)
            if old is None:
                known[key] = anchor_ms
                if len(known) > capacity:
                    known.popitem(last=False)
            else:
                known[key] = max(old, anchor_ms)
                known.move_to_end(key)

    def stored(self, key: bytes, now_ms: int, window_ms: int) -> bool:
        anchor = self._keys.get(key)
        if anchor is None:
            return False
        if anchor + window_ms <= now_ms:
            del self._keys[key]
            return False
        self.hits += 1
        return True

    def clear(self) -> None:
        self._keys.clear()


class InFlightKeys:
    """Keys claimed by writes of this broker not settled yet; each with its outcome.

    The future resolves to True when the write was stored (the key is then remembered),
    False when it certainly was not (the key is free again). It is made when first asked
    for: most keys are never awaited (only a repeat arriving while the write is in
    flight waits), and a future per claimed key was a tenth of the broker's CPU under a
    load of new keys.
    """

    def __init__(self) -> None:
        self._keys: dict[bytes, asyncio.Future[bool] | None] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: bytes) -> bool:
        return key in self._keys

    def get(self, key: bytes) -> asyncio.Future[bool] | None:
        """The outcome of the write holding ``key``; None when no write holds it."""
        known = self._keys
        if key not in known:
            return None
        future = known[key]
        if future is None:
            future = known[key] = asyncio.get_running_loop().create_future()
        return future

    def claim_all(self, keys: Iterable[bytes]) -> None:
        """Marks each of ``keys`` held by a write of this broker (outcomes via ``get``)."""
        known = self._keys
        for key in keys:
            if key not in known:
                known[key] = None

    def settle(self, key: bytes, stored: bool) -> None:
        self.settle_all((key,), stored)

    def settle_all(self, keys: Iterable[bytes], stored: bool) -> None:
        pop = self._keys.pop
        for key in keys:
            future = pop(key, None)
            if future is not None and not future.done():
                future.set_result(stored)

    def keys(self) -> list[bytes]:
        return list(self._keys)
