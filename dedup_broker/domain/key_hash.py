"""The sticky key of an entry and its hash, as Pulsar's Key_Shared dispatcher computes them.

The key is the message's ``ordering_key`` when set, else its ``partition_key`` (decoded
when ``partition_key_b64_encoded``), else Pulsar's ``NONE_KEY`` (the bytes ``NONE_KEY``):
every message without a key shares one hash. The hash is MurmurHash3 (x86, 32 bits,
seed 0) of the key bytes, masked to 31 bits as Pulsar's ``Murmur3_32Hash`` does, modulo
the 65536 slots of the hash range. A Key_Shared consumer's declaration
(``KeySharedSettings``) is stated in these slots.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from enum import Enum

from dedup_broker.protocol import pulsar_api_pb2 as pb

HASH_RANGE_SIZE = 65536
"""Key hashes and the ranges consumers declare lie in ``0 .. HASH_RANGE_SIZE - 1``."""

NONE_KEY = b"NONE_KEY"
"""The key of messages that carry none (Pulsar's ``Commands.NONE_KEY``)."""

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32: 4-byte little-endian blocks, then the tail, then the finaliser."""
    h = seed & _MASK
    length = len(data)
    whole = length - length % 4
    for offset in range(0, whole, 4):
        k = int.from_bytes(data[offset : offset + 4], "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
        h = _rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK
    tail = data[whole:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def sticky_key(metadata: pb.MessageMetadata) -> bytes:
    """The key Key_Shared dispatches by (a batch's is its first message's, in its metadata)."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        if metadata.partition_key_b64_encoded:
            try:
                return base64.b64decode(metadata.partition_key, validate=True)
            except (binascii.Error, ValueError):
                pass
        return metadata.partition_key.encode()
    return NONE_KEY


def key_hash(key: bytes) -> int:
    """The slot of a key in ``0 .. 65535``."""
    return (murmur3_32(key) & 0x7FFFFFFF) % HASH_RANGE_SIZE


class KeySharedMode(Enum):
    AUTO_SPLIT = 0
    STICKY = 1


@dataclass(frozen=True)
class KeySharedSettings:
    """A consumer's ``KeySharedMeta``."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    ranges: tuple[tuple[int, int], ...] = ()
    """STICKY: inclusive ``(start, end)`` slot ranges."""
    allow_out_of_order: bool = False
