"""A companion record: the latest message of one key and where it was stored.

Layout (big-endian): ledger id, entry id (8 bytes each), batch index, batch size (4 each:
-1 and 0 for an entry that is not a batch), then three length-prefixed (4 bytes) fields:
the entry's ``MessageMetadata``, the message's ``SingleMessageMetadata`` (empty for a
non-batch entry) and its payload, uncompressed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dedup_broker.storage.api import Position

_HEAD = struct.Struct(">qqii")
_LENGTH = struct.Struct(">I")


class MalformedCompactedRecordError(ValueError):
    """A companion record that is not one this broker wrote."""


@dataclass(frozen=True, slots=True)
class CompactedMessage:
    position: Position
    batch_index: int
    """Index in its batch; -1 when the entry is a single message."""
    batch_size: int
    entry_metadata: bytes
    single_metadata: bytes
    payload: bytes

    def encode(self) -> bytes:
        parts = [
            _HEAD.pack(
                self.position.ledger_id, self.position.entry_id, self.batch_index, self.batch_size
            )
        ]
        for blob in (self.entry_metadata, self.single_metadata, self.payload):
            parts.append(_LENGTH.pack(len(blob)))
            parts.append(blob)
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes) -> CompactedMessage:
        try:
            ledger_id, entry_id, batch_index, batch_size = _HEAD.unpack_from(data, 0)
            offset = _HEAD.size
            blobs: list[bytes] = []
            for _ in range(3):
                (length,) = _LENGTH.unpack_from(data, offset)
                offset += _LENGTH.size
                if offset + length > len(data):
                    raise MalformedCompactedRecordError("a field overruns the record")
                blobs.append(data[offset : offset + length])
                offset += length
        except struct.error as exc:
            raise MalformedCompactedRecordError(f"truncated record: {exc}") from None
        if offset != len(data):
            raise MalformedCompactedRecordError("bytes after the last field")
        return cls(Position(ledger_id, entry_id), batch_index, batch_size, *blobs)
