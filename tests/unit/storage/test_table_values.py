"""A metadata table's entries under a prefix (one managed ledger's cursors), as keys come
and go; and the order rules between its own writes and what it reads back."""

from __future__ import annotations

from typing import cast

from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.tables.metadata_table import MetadataView, TableValues
from dedup_broker.storage.values import FetchedRecord


def test_entries_under_a_prefix_follow_writes_and_deletes() -> None:
    table = TableValues()
    for ledger in ("a/t1", "a/t10", "a/t2"):
        table._set(f"{ledger}\0sub", b"1")
    table._set("a/t1\0dedup", b"2")
    table._set("a/t1\0sub", b"3")  # replaced
    assert table.items("a/t1\0") == [("a/t1\0dedup", b"2"), ("a/t1\0sub", b"3")]
    table._set("a/t1\0dedup", None)
    table._set("a/t9\0gone", None)  # deleting what is not there
    assert table.items("a/t1\0") == [("a/t1\0sub", b"3")]
    assert [key for key, _ in table.items("a/t1")] == ["a/t1\0sub", "a/t10\0sub"]
    assert [key for key, _ in table.items()] == ["a/t1\0sub", "a/t10\0sub", "a/t2\0sub"]
    assert table.items("b/") == []
    assert len(table) == 3


def _record(offset: int, key: str | None, value: bytes | None) -> FetchedRecord:
    return FetchedRecord(offset, key.encode() if key is not None else None, value, 0, ())


def _view() -> MetadataView:
    # Reads from Kafka are not used here: records are handed over as the tail would.
    return MetadataView("table", cast(KafkaAdmin, None), cast(KafkaReader, None))


def test_a_write_is_never_replaced_by_an_older_record() -> None:
    view = _view()
    view.record_write("k", b"written at 5", 5)
    view.take_tail([_record(3, "k", b"read at 3"), _record(4, "other", b"o")], 5)
    assert view.get("k") == b"written at 5"
    assert view.get("other") == b"o"
    view.take_tail([_record(5, "k", b"written at 5")], 6)
    view.take_tail([_record(6, "k", b"read at 6")], 7)
    assert view.get("k") == b"read at 6"


def test_a_write_the_reading_passed_changes_nothing() -> None:
    view = _view()
    view.take_tail([_record(0, "k", b"at 0"), _record(1, "k", b"at 1")], 2)
    view.record_write("k", b"at 0", 0)  # acknowledged late: the view holds newer
    assert view.get("k") == b"at 1"
    view.record_write("k", None, 2)  # a tombstone ahead of the reading deletes
    assert view.get("k") is None
    view.record_write("k", b"older write", 1)
    assert view.get("k") is None


def test_records_read_twice_apply_once_in_order() -> None:
    view = _view()
    records = [_record(0, "a", b"1"), _record(1, "a", b"2"), _record(2, None, b"x")]
    view.take_tail(records, 3)
    view.record_write("a", b"3", 3)
    view.take_tail(records, 3)  # a refresh that overlapped the tail
    assert view.get("a") == b"3"
    assert view.tail_start() == 3


def test_only_writes_ahead_of_the_reading_keep_an_offset() -> None:
    view = _view()
    for offset in range(100):
        view.record_write(f"key-{offset}", b"v", offset)
    view.take_tail([], 100)  # what the writes stored was read past (compacted away)
    assert view._written_ahead == {}
    assert len(view) == 100
