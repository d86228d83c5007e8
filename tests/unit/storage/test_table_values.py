"""A metadata table's entries under a prefix (one managed ledger's cursors), as keys come
and go."""

from __future__ import annotations

from dedup_broker.storage.tables.metadata_table import TableValues


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
