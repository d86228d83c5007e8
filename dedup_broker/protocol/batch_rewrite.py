"""Rewriting a batch entry so it holds only some of its messages.

Key-window deduplication drops repeats out of a batch and stores the rest, and PIP-6 the
messages of a batch that are stored already (a producer resent it in part). The new entry
keeps the producer's metadata (producer name, sequence range, publish time, codec) so
that PIP-6 and every consumer read it like any other batch; only the message count, the
payload and the checksum change.
"""

from __future__ import annotations

from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import compress, kept_records
from dedup_broker.protocol.framing import encode_message


def rewrite_batch(
    metadata: pb.MessageMetadata,
    payload: bytes,
    keep: list[bool],
    highest_sequence_id: int | None,
    raw: bytes | None = None,
) -> tuple[pb.MessageMetadata, bytes]:
    """The metadata and message block of a batch holding the kept messages, in order.

    ``payload`` is the entry's payload as sent, ``keep`` one flag per message.
    ``highest_sequence_id`` (the range the SEND covered) is written into the metadata,
    so the entry still covers the same sequence ids when its messages are fewer (each
    message keeps its own id in its own metadata). ``raw``: the kept records, when the
    caller read them already (a compiled reader); else they are read here.
    """
    if raw is None:
        raw = kept_records(metadata, payload, keep)
    new = pb.MessageMetadata()
    new.CopyFrom(metadata)
    new.num_messages_in_batch = sum(keep)
    new.uncompressed_size = len(raw)
    if highest_sequence_id is not None and highest_sequence_id >= 0:
        new.highest_sequence_id = highest_sequence_id
    return new, encode_message(new, compress(metadata.compression, raw))
