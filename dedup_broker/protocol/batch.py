"""Batches: decompressing a message payload and splitting it into its single messages.

A batch entry's payload (after decompression) is a sequence of records::

    [singleMetadataSize:4][SingleMessageMetadata][payload of payload_size bytes]

Compression codecs are those of Pulsar: LZ4 in the *block* format (no frame header, the
size comes from ``uncompressed_size``), ZLIB with its zlib header, ZSTD frames and raw
(unframed) Snappy. ZLIB comes from the standard library; the others from ``cramjam``,
imported on first use so the broker still runs (and refuses those codecs clearly)
without it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType

from google.protobuf.message import DecodeError

from dedup_broker.errors import ProtocolError, UnsupportedCompressionError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.commands import as_signed64

#: Refuse to inflate a payload beyond this, whatever its metadata claims.
DEFAULT_MAX_UNCOMPRESSED_SIZE = 64 * 1024 * 1024

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of a batch (or the only message of a non-batch entry)."""

    metadata: pb.SingleMessageMetadata
    payload: bytes


def _cramjam() -> ModuleType:
    try:
        import cramjam
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise UnsupportedCompressionError(
            "LZ4, ZSTD and SNAPPY payloads need the 'cramjam' package"
        ) from exc
    return cramjam


def _codec_name(compression: int) -> str:
    try:
        return pb.CompressionType.Name(compression)
    except ValueError:
        return f"compression type {compression}"


def _inflate_into(codec: Callable[[bytes, bytearray], int], data: bytes, size: int) -> bytes:
    """Decodes into a buffer one byte larger than announced, so any mismatch shows.

    (cramjam's size-hinted calls pad or trim silently; the ``_into`` forms report the
    true length.)
    """
    buffer = bytearray(size + 1)
    written = codec(data, buffer)
    with memoryview(buffer) as view:
        return bytes(view[:written])


def decompress(
    compression: int,
    data: bytes,
    uncompressed_size: int,
    max_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
) -> bytes:
    """Inflates a payload to exactly ``uncompressed_size`` bytes, or raises ProtocolError."""
    if compression == pb.NONE:
        return data
    if uncompressed_size < 0 or uncompressed_size > max_size:
        raise ProtocolError(f"uncompressed size {uncompressed_size} is outside 0..{max_size} bytes")
    name = _codec_name(compression)
    if uncompressed_size == 0:
        return b""
    try:
        if compression == pb.ZLIB:
            inflater = zlib.decompressobj()
            out = inflater.decompress(data, uncompressed_size + 1)
        elif compression == pb.LZ4:
            out = _inflate_into(_cramjam().lz4.decompress_block_into, data, uncompressed_size)
        elif compression == pb.ZSTD:
            out = _inflate_into(_cramjam().zstd.decompress_into, data, uncompressed_size)
        elif compression == pb.SNAPPY:
            out = _inflate_into(_cramjam().snappy.decompress_raw_into, data, uncompressed_size)
        else:
            raise UnsupportedCompressionError(f"unsupported {name}")
    except UnsupportedCompressionError:
        raise
    except Exception as exc:  # codecs raise their own error types
        raise ProtocolError(f"{name} payload does not decompress: {exc}") from exc
    if len(out) != uncompressed_size:
        raise ProtocolError(
            f"{name} payload inflates to {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out


def compress(compression: int, data: bytes) -> bytes:
    """Deflates ``data`` the way Pulsar clients do (the inverse of :func:`decompress`)."""
    if compression == pb.NONE:
        return data
    if compression == pb.ZLIB:
        return zlib.compress(data)
    if compression == pb.LZ4:
        return bytes(_cramjam().lz4.compress_block(data, store_size=False))
    if compression == pb.ZSTD:
        return bytes(_cramjam().zstd.compress(data))
    if compression == pb.SNAPPY:
        return bytes(_cramjam().snappy.compress_raw(data))
    raise UnsupportedCompressionError(f"unsupported {_codec_name(compression)}")


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """Batch entries carry ``num_messages_in_batch`` explicitly, even when it is 1."""
    return metadata.HasField("num_messages_in_batch")


def batch_size(metadata: pb.MessageMetadata) -> int:
    """Messages in a batched entry, 0 for an entry holding a single plain message."""
    if metadata.HasField("num_messages_in_batch"):
        return metadata.num_messages_in_batch
    return 0


def _single_from_entry(metadata: pb.MessageMetadata, payload: bytes) -> SingleMessage:
    """A non-batch entry seen as a one-message batch, so callers handle one shape."""
    single = pb.SingleMessageMetadata(payload_size=len(payload))
    single.properties.extend(metadata.properties)
    if metadata.HasField("partition_key"):
        single.partition_key = metadata.partition_key
    if metadata.HasField("event_time"):
        single.event_time = metadata.event_time
    if metadata.HasField("partition_key_b64_encoded"):
        single.partition_key_b64_encoded = metadata.partition_key_b64_encoded
    if metadata.HasField("ordering_key"):
        single.ordering_key = metadata.ordering_key
    single.sequence_id = metadata.sequence_id
    if metadata.HasField("null_value"):
        single.null_value = metadata.null_value
    if metadata.HasField("null_partition_key"):
        single.null_partition_key = metadata.null_partition_key
    return SingleMessage(single, payload)


def _records(
    data: bytes, count: int, into: pb.SingleMessageMetadata | None
) -> Iterator[tuple[pb.SingleMessageMetadata, int, int]]:
    """Each record's metadata and the span of its payload in ``data``, checked.

    With ``into`` every record's metadata is parsed into that one object (valid until the
    next step): reading keys at a batch's rate makes no object per message.
    """
    unpack = _I32.unpack_from
    parse = pb.SingleMessageMetadata.FromString
    parse_into = into.ParseFromString if into is not None else None
    pos = 0
    end = len(data)
    view = memoryview(data)
    try:
        for index in range(count):
            if end - pos < 4:
                raise ProtocolError(f"batch truncated before message {index} of {count}")
            (meta_size,) = unpack(view, pos)
            pos += 4
            if meta_size < 0 or pos + meta_size > end:
                raise ProtocolError(f"batch message {index}: metadata size {meta_size} overflows")
            try:  # upb parses any buffer (the stubs say bytes): no copy of the metadata
                if parse_into is None:
                    single = parse(view[pos : pos + meta_size])  # type: ignore[arg-type]
                else:
                    parse_into(view[pos : pos + meta_size])  # type: ignore[arg-type]
                    single = into  # type: ignore[assignment]
            except DecodeError as exc:
                raise ProtocolError(f"batch message {index}: metadata does not parse") from exc
            if not single.HasField("payload_size"):
                raise ProtocolError(f"batch message {index}: metadata lacks payload_size")
            pos += meta_size
            size = single.payload_size
            if size < 0 or pos + size > end:
                raise ProtocolError(f"batch message {index}: payload size {size} overflows")
            yield single, pos, pos + size
            pos += size
    finally:
        view.release()
    if pos != end:
        raise ProtocolError(f"batch has {end - pos} bytes after its {count} messages")


def _parse_records(data: bytes, count: int) -> list[SingleMessage]:
    return [SingleMessage(single, data[lo:hi]) for single, lo, hi in _records(data, count, None)]


def _batch_data(metadata: pb.MessageMetadata, payload: bytes, max_uncompressed_size: int) -> bytes:
    if metadata.encryption_keys:
        raise ProtocolError("the payload is encrypted; its messages cannot be read")
    return decompress(
        metadata.compression, payload, metadata.uncompressed_size, max_uncompressed_size
    )


def scan_batch(
    metadata: pb.MessageMetadata,
    payload: bytes,
    max_uncompressed_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
) -> Iterator[tuple[pb.SingleMessageMetadata, memoryview]]:
    """The messages of an entry as ``split_batch`` finds them, for reading only.

    One metadata object is reused for every message and each payload is a view into the
    entry: both are valid until the next message. Checks are those of ``split_batch``.
    """
    data = _batch_data(metadata, payload, max_uncompressed_size)
    if not is_batch(metadata):
        message = _single_from_entry(metadata, data)
        yield message.metadata, memoryview(message.payload)
        return
    count = metadata.num_messages_in_batch
    if count < 0:
        raise ProtocolError(f"negative num_messages_in_batch {count}")
    view = memoryview(data)
    for single, lo, hi in _records(data, count, pb.SingleMessageMetadata()):
        yield single, view[lo:hi]


def split_batch(
    metadata: pb.MessageMetadata,
    payload: bytes,
    max_uncompressed_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
) -> list[SingleMessage]:
    """The messages of an entry, in order, with their own metadata.

    ``payload`` is the entry's payload as sent (compressed if the producer compressed).
    Messages removed by compaction (``compacted_out``) and null values are returned
    like any other: their metadata says what they are. A non-batch entry yields one
    message whose metadata is derived from the entry's.
    """
    data = _batch_data(metadata, payload, max_uncompressed_size)
    if not is_batch(metadata):
        return [_single_from_entry(metadata, data)]
    count = metadata.num_messages_in_batch
    if count < 0:
        raise ProtocolError(f"negative num_messages_in_batch {count}")
    return _parse_records(data, count)


def kept_records(
    metadata: pb.MessageMetadata,
    payload: bytes,
    keep: list[bool],
    max_uncompressed_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
) -> bytes:
    """The uncompressed batch payload of the kept messages, in order: each record's bytes
    as the producer wrote them (records lie end to end, so no metadata is parsed again
    into a new object nor written out again)."""
    if not is_batch(metadata):
        raise ProtocolError("only a batch entry has messages to keep")
    data = _batch_data(metadata, payload, max_uncompressed_size)
    count = metadata.num_messages_in_batch
    if len(keep) != count:
        raise ValueError(f"one keep flag per message is required ({len(keep)} for {count})")
    parts: list[bytes] = []
    start = 0
    for kept, (_, _, end) in zip(
        keep, _records(data, count, pb.SingleMessageMetadata()), strict=True
    ):
        if kept:
            parts.append(data[start:end])
        start = end
    return b"".join(parts)


def batch_sequence_range(metadata: pb.MessageMetadata, payload: bytes) -> tuple[int, int]:
    """(lowest, highest) sequence id covered by one SEND, for deduplication.

    Java clients put the highest id in ``highest_sequence_id``; C++-based clients leave
    it unset and give every message its own ``sequence_id`` in its batch metadata. When
    neither is available (encrypted payload, codec not installed, ids absent), ids are
    taken as consecutive from ``sequence_id``, which is how clients assign them.
    """
    lowest = metadata.sequence_id
    if not is_batch(metadata):
        return lowest, lowest
    if metadata.HasField("highest_sequence_id") and metadata.highest_sequence_id >= lowest:
        return lowest, metadata.highest_sequence_id
    fallback = lowest + max(metadata.num_messages_in_batch, 1) - 1
    if metadata.encryption_keys:
        return lowest, fallback
    try:
        ids = [m.sequence_id for m, _ in scan_batch(metadata, payload) if m.HasField("sequence_id")]
    except UnsupportedCompressionError:
        return lowest, fallback
    if ids:
        return lowest, max(max(ids), lowest)
    return lowest, fallback


def batch_sequence_ids(metadata: pb.MessageMetadata, payload: bytes) -> list[int] | None:
    """Each message's sequence id, in the batch's order, as Pulsar's signed longs; None
    when the messages cannot be read (encrypted, or a codec that is not installed).

    Clients write every message's own id into its batch metadata; a message without one
    is taken to follow the entry's ``sequence_id`` by its index, as clients number them.
    """
    lowest = metadata.sequence_id
    if not is_batch(metadata):
        return [as_signed64(lowest)]
    if metadata.encryption_keys:
        return None
    ids: list[int] = []
    append = ids.append
    try:
        for index, (single, _) in enumerate(scan_batch(metadata, payload)):
            append(single.sequence_id if single.HasField("sequence_id") else lowest + index)
    except UnsupportedCompressionError:
        return None
    if ids and max(ids) >= 1 << 63:  # read as uint64: Pulsar's negative longs
        return [as_signed64(i) for i in ids]
    return ids


def build_batch(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """An uncompressed batch payload; each ``payload_size`` is set from its payload.

    The caller's metadata objects are left untouched.
    """
    parts: list[bytes] = []
    for single, payload in messages:
        meta = pb.SingleMessageMetadata()
        meta.CopyFrom(single)
        meta.payload_size = len(payload)
        encoded = meta.SerializeToString()
        parts.append(_U32.pack(len(encoded)))
        parts.append(encoded)
        parts.append(payload)
    return b"".join(parts)
