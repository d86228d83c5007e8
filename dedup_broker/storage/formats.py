"""Encoding of the storage layer's Kafka records, so protobuf stays in one file.

Keys of the compacted topics and the record layout of ledger topics are defined here
too; ``docs/storage.md`` describes the same formats for people.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from dedup_broker.storage import storage_pb2 as pb
from dedup_broker.storage.values import (
    CURSOR_KEY_SEPARATOR,
    LedgerInfo,
    LedgerMetadata,
    OffloadedHeader,
    OffloadInfo,
    Position,
)

LEDGER_HEADER_KEY = "dedup-broker-ledger-metadata"
"""Record header marking offset 0 of a ledger topic as the ledger's metadata."""
LEDGER_HEADER_VALUE = b"1"

_SIZE = struct.Struct(">q")
_ENTRY_KEY = struct.Struct(">qq")


# --- topic names ----------------------------------------------------------------
def ledger_topic(cluster_name: str, ledger_id: int) -> str:
    return f"{cluster_name}.ledger.{ledger_id}"


def ledger_id_of_topic(cluster_name: str, topic: str) -> int | None:
    """The ledger id of ``cluster_name``'s ledger topic ``topic``; None for other topics."""
    prefix = f"{cluster_name}.ledger."
    if not topic.startswith(prefix):
        return None
    digits = topic[len(prefix) :]
    if not digits.isascii() or not digits.isdigit() or str(int(digits)) != digits:
        return None
    return int(digits)


def ledger_ids_topic(cluster_name: str) -> str:
    """One partition; the offset of each allocation record is a ledger id."""
    return f"{cluster_name}.ledger-ids"


def managed_ledgers_topic(cluster_name: str) -> str:
    """Compacted: managed ledger name -> ``ManagedLedgerInfo`` (its ledger list)."""
    return f"{cluster_name}.managed-ledgers"


def cursors_topic(cluster_name: str) -> str:
    """Compacted: cursor key -> ``CursorInfo``."""
    return f"{cluster_name}.cursors"


def fences_topic(cluster_name: str) -> str:
    """The write fences' small records (proofs, and one per commit): a partition per
    ownership slot (``internal_topic_partitions``)."""
    return f"{cluster_name}.fences"


def policies_topic(cluster_name: str) -> str:
    """Compacted: namespace and topic policies, and the registered brokers."""
    return f"{cluster_name}.policies"


# --- ledger topics --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryKey:
    """What an entry record's key says: the ledger's bytes up to and including it, and
    the entry id it was written as (None in records written before ids were kept)."""

    cumulative_size: int
    entry_id: int | None = None


def encode_entry_key(cumulative_size: int, entry_id: int) -> bytes:
    """Key of an entry record: bytes of entry data in the ledger up to and including it
    (a recovering broker learns a ledger's size from its last record alone, the way
    BookKeeper keeps a running length in each entry), and the entry id it was sent as.

    The id tells a recovering broker where the records stop following the writer's order:
    a write that timed out in the producer's queue leaves a gap, and the records sent
    after it land one place early (librdkafka's idempotent producer allows such gaps)."""
    return _ENTRY_KEY.pack(cumulative_size, entry_id)


def decode_entry_key(key: bytes | None) -> EntryKey | None:
    if key is None:
        return None
    if len(key) == _ENTRY_KEY.size:
        size, entry_id = _ENTRY_KEY.unpack(key)
        return EntryKey(int(size), int(entry_id))
    if len(key) == _SIZE.size:
        return EntryKey(int(_SIZE.unpack(key)[0]))
    return None


def encode_ledger_metadata(meta: LedgerMetadata) -> bytes:
    return pb.LedgerMetadata(
        ledger_id=meta.ledger_id,
        managed_ledger_name=meta.managed_ledger_name,
        component=meta.component,
        cursor_name=meta.cursor_name,
        created_ms=meta.created_ms,
        created_by=meta.created_by,
    ).SerializeToString()


def decode_ledger_metadata(data: bytes) -> LedgerMetadata:
    msg = pb.LedgerMetadata.FromString(data)
    return LedgerMetadata(
        ledger_id=msg.ledger_id,
        managed_ledger_name=msg.managed_ledger_name,
        component=pb.LedgerComponent.Name(msg.component),
        cursor_name=msg.cursor_name,
        created_ms=msg.created_ms,
        created_by=msg.created_by,
    )


def encode_ledger_id_allocation(allocated_by: str, allocated_ms: int, purpose: str) -> bytes:
    return pb.LedgerIdAllocation(
        allocated_by=allocated_by, allocated_ms=allocated_ms, managed_ledger_name=purpose
    ).SerializeToString()


def decode_ledger_id_allocation(data: bytes) -> str:
    """The managed ledger name an allocation record was made for."""
    return pb.LedgerIdAllocation.FromString(data).managed_ledger_name


# --- managed ledger info --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ManagedLedgerRecord:
    ledgers: list[LedgerInfo]
    properties: dict[str, str] = field(default_factory=dict)
    last_listed: int = -1
    """The highest ledger id the list ever held; -1: none (or a record older than it)."""

    @property
    def last_listed_id(self) -> int:
        """The highest ledger id listed now or before."""
        return max(self.last_listed, self.ledgers[-1].ledger_id if self.ledgers else -1)


def encode_managed_ledger_info(record: ManagedLedgerRecord) -> bytes:
    msg = pb.ManagedLedgerInfo()
    for info in record.ledgers:
        ledger = msg.ledgerInfo.add(ledgerId=info.ledger_id, entries=info.entries)
        if not info.is_open:
            ledger.size = info.size
            ledger.timestamp = info.timestamp_ms
        if info.offload is not None:
            _encode_offload(info.offload, ledger.offloadContext)
    for key, value in sorted(record.properties.items()):
        msg.properties.add(key=key, value=value)
    if record.last_listed_id >= 0:
        msg.lastListedLedgerId = record.last_listed_id
    return msg.SerializeToString()


def decode_managed_ledger_info(data: bytes) -> ManagedLedgerRecord:
    msg = pb.ManagedLedgerInfo.FromString(data)
    ledgers = []
    for ledger in msg.ledgerInfo:
        entries = ledger.entries if ledger.HasField("entries") else -1
        if entries < 0:
            ledgers.append(LedgerInfo(ledger.ledgerId, -1, 0, 0))
        else:
            offload = (
                _decode_offload(ledger.offloadContext)
                if ledger.HasField("offloadContext")
                else None
            )
            ledgers.append(
                LedgerInfo(ledger.ledgerId, entries, ledger.size, ledger.timestamp, offload)
            )
    last_listed = msg.lastListedLedgerId if msg.HasField("lastListedLedgerId") else -1
    return ManagedLedgerRecord(ledgers, {kv.key: kv.value for kv in msg.properties}, last_listed)


# --- offloaded ledgers ------------------------------------------------------------
def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def uid_to_longs(uid: str) -> tuple[int, int]:
    """Pulsar keeps an offload uid as two signed 64-bit halves (msb, lsb)."""
    value = uuid.UUID(uid).int
    return _signed64(value >> 64), _signed64(value & ((1 << 64) - 1))


def uid_from_longs(msb: int, lsb: int) -> str:
    return str(uuid.UUID(int=((msb & ((1 << 64) - 1)) << 64) | (lsb & ((1 << 64) - 1))))


def _encode_offload(offload: OffloadInfo, context: pb.OffloadContext) -> None:
    context.uidMsb, context.uidLsb = uid_to_longs(offload.uid)
    context.complete = offload.complete
    context.bookkeeperDeleted = offload.kafka_deleted
    context.timestamp = offload.timestamp_ms
    context.driverMetadata.name = offload.driver
    for key, value in sorted(offload.properties.items()):
        context.driverMetadata.properties.add(key=key, value=value)


def _decode_offload(context: pb.OffloadContext) -> OffloadInfo:
    return OffloadInfo(
        uid=uid_from_longs(context.uidMsb, context.uidLsb),
        complete=context.complete,
        kafka_deleted=context.bookkeeperDeleted,
        timestamp_ms=context.timestamp,
        driver=context.driverMetadata.name,
        properties={kv.key: kv.value for kv in context.driverMetadata.properties},
    )


def encode_offloaded_header(header: OffloadedHeader) -> bytes:
    return pb.OffloadedLedgerHeader(
        ledger_id=header.ledger_id,
        managed_ledger_name=header.managed_ledger_name,
        component=header.component,
        cursor_name=header.cursor_name,
        uid=header.uid,
        entries=header.entries,
        size=header.size,
        offloaded_ms=header.offloaded_ms,
        offloaded_by=header.offloaded_by,
        cluster_name=header.cluster_name,
    ).SerializeToString()


def decode_offloaded_header(data: bytes) -> OffloadedHeader:
    msg = pb.OffloadedLedgerHeader.FromString(data)
    if not msg.IsInitialized():
        raise ValueError("the offloaded ledger header misses required fields")
    return OffloadedHeader(
        ledger_id=msg.ledger_id,
        managed_ledger_name=msg.managed_ledger_name,
        component=pb.LedgerComponent.Name(msg.component),
        cursor_name=msg.cursor_name,
        uid=msg.uid,
        entries=msg.entries,
        size=msg.size,
        offloaded_ms=msg.offloaded_ms,
        offloaded_by=msg.offloaded_by,
        cluster_name=msg.cluster_name,
    )


# --- cursors --------------------------------------------------------------------
def cursor_key(managed_ledger_name: str, cursor_name: str) -> str:
    return managed_ledger_name + CURSOR_KEY_SEPARATOR + cursor_name


def cursor_key_prefix(managed_ledger_name: str) -> str:
    return managed_ledger_name + CURSOR_KEY_SEPARATOR


@dataclass(frozen=True, slots=True)
class CursorRecord:
    """A durable cursor's stored state."""

    mark_delete: Position
    individually_deleted: list[tuple[Position, Position]]
    """Inclusive ranges above the mark-delete position, each within one ledger."""
    properties: dict[str, int]
    last_active_ms: int
    batch_acks: dict[Position, tuple[int, ...]] = field(default_factory=dict)
    """Entries acknowledged in part (batch-index acknowledgement) -> the bits of their
    messages not acknowledged yet, in 64-bit words as clients send them."""


def encode_cursor_info(record: CursorRecord) -> bytes:
    msg = pb.ManagedCursorInfo(
        cursorsLedgerId=-1,
        markDeleteLedgerId=record.mark_delete.ledger_id,
        markDeleteEntryId=record.mark_delete.entry_id,
        lastActive=record.last_active_ms,
    )
    for start, end in record.individually_deleted:
        rng = msg.individualDeletedMessages.add()
        # Stored as Pulsar does: (lower, upper] with lower just before the first entry.
        rng.lowerEndpoint.ledgerId = start.ledger_id
        rng.lowerEndpoint.entryId = start.entry_id - 1
        rng.upperEndpoint.ledgerId = end.ledger_id
        rng.upperEndpoint.entryId = end.entry_id
    for name, value in sorted(record.properties.items()):
        msg.properties.add(name=name, value=value)
    for position, words in sorted(record.batch_acks.items()):
        info = msg.batchedEntryDeletionIndexInfo.add(deleteSet=words)
        info.position.ledgerId = position.ledger_id
        info.position.entryId = position.entry_id
    return msg.SerializeToString()


def decode_cursor_info(data: bytes) -> CursorRecord:
    msg = pb.ManagedCursorInfo.FromString(data)
    ranges = []
    for rng in msg.individualDeletedMessages:
        lower, upper = rng.lowerEndpoint, rng.upperEndpoint
        if lower.ledgerId == upper.ledgerId and lower.entryId < upper.entryId:
            ranges.append(
                (
                    Position(lower.ledgerId, lower.entryId + 1),
                    Position(upper.ledgerId, upper.entryId),
                )
            )
    return CursorRecord(
        mark_delete=Position(msg.markDeleteLedgerId, msg.markDeleteEntryId),
        individually_deleted=ranges,
        properties={prop.name: prop.value for prop in msg.properties},
        last_active_ms=msg.lastActive,
        batch_acks={
            Position(info.position.ledgerId, info.position.entryId): tuple(info.deleteSet)
            for info in msg.batchedEntryDeletionIndexInfo
        },
    )


# --- broker announcements (policies table) ---------------------------------------
# Running brokers announce their admin URL in the policies table, so processes that are
# not brokers (deletion workers) can find them and ask whether a ledger is still in use.
BROKERS_KEY = "brokers/"
"""Key prefix of the announcements in the policies table."""


def broker_key(advertised_address: str, broker_service_port: int) -> str:
    return f"{BROKERS_KEY}{advertised_address}:{broker_service_port}"


def broker_record(
    web_service_url: str, broker_id: str, listeners: dict[str, dict[str, str]] | None = None
) -> bytes:
    """The announcement: admin URL, storage broker id and the advertised listeners."""
    record = {"webServiceUrl": web_service_url, "brokerId": broker_id}
    return json.dumps({**record, "listeners": listeners or {}}).encode()


def broker_urls(entries: Iterable[tuple[str, bytes]]) -> list[str]:
    """Admin URLs of the registered brokers, from the policies table's entries."""
    urls = []
    for key, value in entries:
        if key.startswith(BROKERS_KEY):
            try:
                urls.append(str(json.loads(value)["webServiceUrl"]))
            except (ValueError, KeyError, TypeError):
                continue
    return sorted(set(urls))
