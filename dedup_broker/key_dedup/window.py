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
import importlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, NamedTuple, cast

from dedup_broker.errors import PermanentError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import SingleMessage, decompress, is_batch, scan_batch
from dedup_broker.protocol.framing import parse_message, payload_view

compiled_keys: Any
"""The compiled key reader (``_batch_keys.c``), built by the package's install where the
machine has a C compiler; None without it (the pure-Python path, same keys)."""
try:
    compiled_keys = importlib.import_module("dedup_broker.key_dedup._batch_keys")
except ImportError:  # pragma: no cover - depends on the installation
    compiled_keys = None

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


_KINDS = {KeySourceKind.CONTENT: 0, KeySourceKind.PARTITION_KEY: 1, KeySourceKind.PROPERTY: 2}
"""The compiled reader's numbers for the key sources."""


@dataclass(frozen=True)
class KeySource:
    kind: KeySourceKind
    property_name: str = ""
    code: int = field(init=False, repr=False, compare=False)
    """The compiled reader's number for ``kind`` (looked up once, not per SEND)."""
    name_bytes: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", _KINDS[self.kind])
        object.__setattr__(self, "name_bytes", self.property_name.encode())

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
    return _keys(source, [(message.metadata, message.payload)])[0]


def _keys(
    source: KeySource, records: Iterable[tuple[pb.SingleMessageMetadata, bytes | memoryview]]
) -> list[bytes | None]:
    """Keys of records read in one pass; the key source is decided once, not per message
    (``records`` may reuse one metadata object: each key is made before the next step)."""
    sha256 = hashlib.sha256
    if source.kind is KeySourceKind.CONTENT:
        return [sha256(payload).digest()[:KEY_BYTES] for _, payload in records]
    if source.kind is KeySourceKind.PARTITION_KEY:
        return [
            sha256(b"k" + meta.partition_key.encode()).digest()[:KEY_BYTES]
            if meta.HasField("partition_key") and not meta.null_partition_key
            else None
            for meta, _ in records
        ]
    name = source.property_name
    return [_property_key(meta, name) for meta, _ in records]


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


def entry_keys(
    entry: bytes, source: KeySource, metadata: pb.MessageMetadata | None = None
) -> list[bytes | None] | None:
    """The key of every message of an entry, in order, without keeping its messages;
    None when its messages cannot be keyed. ``metadata``: the entry's, parsed already
    (a SEND's, checked on arrival): its payload is then read in place."""
    read = _keyable(entry, metadata)
    if read is None:
        return None
    metadata, payload, batch = read
    if batch is not None:
        keys = batch_keys_compiled(batch, metadata.num_messages_in_batch, source)
        if keys is not None:
            return keys
    return _keys(source, scan_batch(metadata, bytes(payload)))


class PackedKeys(NamedTuple):
    """An entry's keys with no object per key: those of the messages that have one, end
    to end, and the indexes of the messages that have none."""

    packed: bytes
    missing: list[int]
    messages: int

    @classmethod
    def of(cls, keys: list[bytes | None]) -> PackedKeys:
        missing = [i for i, key in enumerate(keys) if key is None]
        return cls(b"".join(k for k in keys if k is not None), missing, len(keys))


def entry_keys_packed(
    entry: bytes, source: KeySource, metadata: pb.MessageMetadata
) -> PackedKeys | None:
    """``entry_keys``, packed (read so by the compiled reader where it reads the batch).
    An uncompressed batch (what a SEND carries unless its producer compresses) is read
    in one compiled call from the entry itself, its metadata checked there too."""
    if compiled_keys is not None:
        found = compiled_keys.block_keys_packed(entry, source.code, source.name_bytes)
        if found is not None:
            return PackedKeys(*found)
    read = _keyable(entry, metadata)
    if read is None:
        return None
    _, payload, batch = read
    count = metadata.num_messages_in_batch
    if batch is not None:
        found = compiled_keys.batch_keys_packed(batch, count, source.code, source.name_bytes)
        if found is not None:
            return PackedKeys(found[0], found[1], count)
    # The Python path on the payload read above (not the entry parsed again).
    return PackedKeys.of(_keys(source, scan_batch(metadata, bytes(payload))))


def _keyable(
    entry: bytes, metadata: pb.MessageMetadata | None
) -> tuple[pb.MessageMetadata, bytes | memoryview, bytes | None] | None:
    """An entry's metadata and payload, and its batch uncompressed when the compiled
    reader can read it (else None); None when its messages cannot be keyed."""
    payload: bytes | memoryview
    if metadata is None:
        parsed = parse_message(entry)
        metadata, payload = parsed.metadata, parsed.payload
    else:
        payload = payload_view(entry)
    if not checkable(metadata) or metadata.HasField("marker_type"):
        return None
    if compiled_keys is None or not is_batch(metadata) or metadata.num_messages_in_batch < 0:
        return metadata, payload, None
    data = bytes(payload) if metadata.compression != pb.NONE else payload
    batch = decompress(metadata.compression, cast(bytes, data), metadata.uncompressed_size)
    return metadata, payload, batch


def batch_keys_compiled(data: bytes, count: int, source: KeySource) -> list[bytes | None] | None:
    """Keys of an uncompressed batch payload's ``count`` messages read by the compiled
    helper (the same keys as the Python path); None when it is not built or leaves the
    payload to the Python path (anything malformed or unusual, which that path reports)."""
    if compiled_keys is None:
        return None
    keys: list[bytes | None] | None = compiled_keys.batch_keys(
        data, count, source.code, source.name_bytes
    )
    return keys


def kept_records_compiled(
    metadata: pb.MessageMetadata, payload: bytes, keep: list[bool]
) -> bytes | None:
    """The kept messages' records (``batch.kept_records``) read by the compiled helper:
    only the records' sizes are read, no object made per message. None when it is not
    built or leaves the batch to the Python path (which reports what is wrong)."""
    count = metadata.num_messages_in_batch
    if compiled_keys is None or not is_batch(metadata) or metadata.encryption_keys:
        return None
    if len(keep) != count:
        return None
    data = decompress(metadata.compression, payload, metadata.uncompressed_size)
    kept: bytes | None = compiled_keys.batch_kept(data, count, bytes(keep))
    return kept


def stored_keys(entry: bytes, source: KeySource) -> list[bytes]:
    """Keys of a stored entry, as the publish path computed them when it wrote it."""
    return [k for k in entry_keys(entry, source) or () if k is not None]


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


@dataclass(slots=True)
class EntrySorting:
    """What stays of one entry: a flag per message, the kept messages' keys, the writes
    its answer waits for (it repeats keys they hold) and its messages without a key."""

    keep: list[bool]
    keys: list[bytes]
    after: list[asyncio.Future[bool]]
    unchecked: int

    @property
    def dropped(self) -> int:
        return len(self.keep) - len(self.keys) - self.unchecked


def sort_entry(
    keys: list[bytes | None],
    states: dict[bytes, KeyState],
    futures: dict[bytes, asyncio.Future[bool]],
) -> EntrySorting | None:
    """Keeps and drops of one entry from its verdicts; None when a message repeats a key
    another broker's write holds (that write's outcome cannot be awaited here).

    A repeat of a key this broker's write holds is dropped at once, on the condition
    that write succeeds: the answer waits for it (in ``after``). (An entry whose keys are
    all new and distinct, the common case, is appended whole before it gets here.)
    """
    sorting = EntrySorting([], [], [], 0)
    keep, kept, after = sorting.keep.append, sorting.keys.append, sorting.after.append
    for key, verdict in zip(keys, verdicts(keys, states), strict=True):
        if key is None:
            keep(True)
            sorting.unchecked += 1
        elif verdict is MessageVerdict.KEEP:
            keep(True)
            kept(key)
        else:
            keep(False)
            if verdict is MessageVerdict.WAIT:
                future = futures.get(key)
                if future is None:
                    return None
                after(future)
    return sorting
