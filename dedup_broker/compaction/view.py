"""What a ``read_compacted`` reader sees before the horizon: one entry per stored
position that still holds the latest message of some key, in the order of the log.

A batch keeps only its messages that are still the latest of their key, in their order.
Pulsar keeps the others as ``compacted_out`` placeholders, but the C++-based clients
deliver those as empty messages; so here the batch indexes of a compacted batch count
the kept messages only (ledger and entry ids stay those of the original topic).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable

from dedup_broker.compaction.records import CompactedMessage
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.protocol.batch import build_batch
from dedup_broker.protocol.framing import encode_message
from dedup_broker.storage.api import Entry, Position

log = logging.getLogger(__name__)


class CompactedView:
    def __init__(self, horizon: Position, latest: Iterable[CompactedMessage]) -> None:
        self.horizon = horizon
        """The last position compaction covered: later ones are read from the topic."""
        by_position: dict[Position, list[CompactedMessage]] = {}
        for message in latest:
            if message.position <= horizon:
                by_position.setdefault(message.position, []).append(message)
        self._positions = sorted(by_position)
        self._entries = [_entry(p, by_position[p]) for p in self._positions]

    def __len__(self) -> int:
        return len(self._entries)

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries at or after ``start``."""
        index = bisect.bisect_left(self._positions, start)
        return self._entries[index : index + max_entries]


def _entry(position: Position, messages: list[CompactedMessage]) -> Entry:
    first = messages[0]
    metadata = pb.MessageMetadata()
    metadata.ParseFromString(first.entry_metadata)
    if first.batch_index < 0:
        return Entry(position, encode_message(metadata, first.payload), metadata.publish_time)
    records: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    for message in sorted(messages, key=lambda m: m.batch_index):
        single = pb.SingleMessageMetadata()
        single.ParseFromString(message.single_metadata)
        records.append((single, message.payload))
    raw = build_batch(records)
    metadata.compression = pb.NONE
    metadata.uncompressed_size = len(raw)
    metadata.num_messages_in_batch = len(records)
    return Entry(position, encode_message(metadata, raw), metadata.publish_time)
