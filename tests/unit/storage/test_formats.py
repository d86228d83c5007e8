"""The records the storage layer writes to Kafka."""

from __future__ import annotations

from dedup_broker.storage import formats
from dedup_broker.storage import storage_pb2 as pb
from dedup_broker.storage.values import LedgerInfo, LedgerMetadata, Position


def test_entry_key_is_the_running_size_then_the_entry_id_big_endian() -> None:
    key = formats.encode_entry_key(258, 3)
    assert key == b"\x00\x00\x00\x00\x00\x00\x01\x02" + b"\x00" * 7 + b"\x03"
    assert formats.decode_entry_key(key) == formats.EntryKey(258, 3)


def test_topic_and_key_names() -> None:
    assert formats.ledger_topic("prod", 42) == "prod.ledger.42"
    assert (
        formats.cursor_key("public/default/persistent/t", "sub")
        == "public/default/persistent/t\x00sub"
    )


def test_managed_ledger_info_round_trip_and_wire_fields() -> None:
    record = formats.ManagedLedgerRecord(
        [LedgerInfo(3, 10, 100, 1700), LedgerInfo(8, -1, 0, 0)], {"b": "2", "a": "1"}
    )
    data = formats.encode_managed_ledger_info(record)
    decoded = formats.decode_managed_ledger_info(data)
    assert (decoded.ledgers, decoded.properties) == (record.ledgers, record.properties)
    assert decoded.last_listed_id == 8
    msg = pb.ManagedLedgerInfo.FromString(data)
    assert [(li.ledgerId, li.entries) for li in msg.ledgerInfo] == [(3, 10), (8, -1)]
    assert not msg.ledgerInfo[1].HasField("size")
    assert [(kv.key, kv.value) for kv in msg.properties] == [("a", "1"), ("b", "2")]
    assert msg.lastListedLedgerId == 8


def test_a_list_trimmed_empty_remembers_its_last_ledger() -> None:
    """Orphans of a lazily created ledger are found after the last ledger ever listed,
    even once trimming removed every ledger."""
    emptied = formats.ManagedLedgerRecord([], {}, last_listed=12)
    decoded = formats.decode_managed_ledger_info(formats.encode_managed_ledger_info(emptied))
    assert decoded.ledgers == [] and decoded.last_listed_id == 12
    # A record written before the field existed: its last ledger is the last listed.
    old = pb.ManagedLedgerInfo()
    old.ledgerInfo.add(ledgerId=5, entries=2, size=20, timestamp=1)
    assert formats.decode_managed_ledger_info(old.SerializeToString()).last_listed_id == 5
    never = formats.decode_managed_ledger_info(pb.ManagedLedgerInfo().SerializeToString())
    assert never.last_listed_id == -1


def test_cursor_info_uses_pulsar_open_closed_ranges() -> None:
    record = formats.CursorRecord(
        mark_delete=Position(5, 3),
        individually_deleted=[(Position(5, 6), Position(5, 8)), (Position(7, 0), Position(7, 0))],
        properties={"seq": 41, "other": -2},
        last_active_ms=1234,
    )
    data = formats.encode_cursor_info(record)
    msg = pb.ManagedCursorInfo.FromString(data)
    assert msg.cursorsLedgerId == -1
    assert (msg.markDeleteLedgerId, msg.markDeleteEntryId) == (5, 3)
    assert [
        (
            r.lowerEndpoint.ledgerId,
            r.lowerEndpoint.entryId,
            r.upperEndpoint.ledgerId,
            r.upperEndpoint.entryId,
        )
        for r in msg.individualDeletedMessages
    ] == [(5, 5, 5, 8), (7, -1, 7, 0)]
    assert [(p.name, p.value) for p in msg.properties] == [("other", -2), ("seq", 41)]
    assert formats.decode_cursor_info(data) == record


def test_ledger_metadata_round_trip() -> None:
    meta = LedgerMetadata(9, "t", "MANAGED_CURSOR", "sub", 1700, "host:6650/1")
    data = formats.encode_ledger_metadata(meta)
    assert pb.LedgerMetadata.FromString(data).component == pb.MANAGED_CURSOR
    assert formats.decode_ledger_metadata(data) == meta


def test_cursor_info_keeps_batches_acknowledged_in_part_in_pulsars_field() -> None:
    record = formats.CursorRecord(
        mark_delete=Position(5, 3),
        individually_deleted=[],
        properties={},
        last_active_ms=1,
        batch_acks={Position(7, 2): (0b1010,), Position(5, 9): (-1, 0b11)},
    )
    data = formats.encode_cursor_info(record)
    msg = pb.ManagedCursorInfo.FromString(data)
    assert (
        pb.ManagedCursorInfo.DESCRIPTOR.fields_by_name["batchedEntryDeletionIndexInfo"].number == 7
    )
    assert [
        (i.position.ledgerId, i.position.entryId, list(i.deleteSet))
        for i in msg.batchedEntryDeletionIndexInfo
    ] == [(5, 9, [-1, 0b11]), (7, 2, [0b1010])]
    assert formats.decode_cursor_info(data) == record


def test_a_cursor_stored_before_batch_ack_sets_were_kept_still_loads() -> None:
    # Written by the encoder of the format without field 7: mark-delete 5:3, acked 5:6..5:8,
    # property seq=41, last active 1234.
    stored = (
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x10\x05\x18\x03"
        b'"\x0c\n\x04\x08\x05\x10\x05\x12\x04\x08\x05\x10\x08*\x07\n\x03seq\x10)0\xd2\t'
    )
    assert formats.decode_cursor_info(stored) == formats.CursorRecord(
        Position(5, 3), [(Position(5, 6), Position(5, 8))], {"seq": 41}, 1234, {}
    )


def test_entry_keys_carry_the_size_so_far_and_the_entry_id() -> None:
    key = formats.encode_entry_key(1234, 56)
    assert formats.decode_entry_key(key) == formats.EntryKey(1234, 56)
    # Records written before entry ids were kept: the size alone.
    assert formats.decode_entry_key(b"\x00" * 7 + b"\x63") == formats.EntryKey(99, None)
    assert formats.decode_entry_key(None) is None
    assert formats.decode_entry_key(b"odd") is None
