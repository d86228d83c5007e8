"""A scan over an offloaded ledger reads its copy in tiered storage, in bounded runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from dedup_broker.storage.ledger import entry_reader
from dedup_broker.storage.offload.filesystem import FilesystemOffloader
from dedup_broker.storage.values import Entry, OffloadedHeader, Position


def test_scan_of_an_offloaded_copy_hands_consecutive_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(entry_reader, "_OFFLOADED_SCAN_BYTES", 10)
    offloader = FilesystemOffloader(tmp_path, "c")
    uid = str(uuid.uuid4())
    header = OffloadedHeader(
        7, "public/default/persistent/t", "MANAGED_LEDGER", "", uid, 6, 0, 1, "b", "c"
    )
    writer = offloader.begin(header)
    writer.add([Entry(Position(7, i), b"entry-%d" % i, 1000 + i) for i in range(6)])
    writer.finish()
    runs: list[tuple[int, int, list[bytes]]] = []

    def visit(ledger_id: int, first_entry_id: int, data: list[bytes]) -> None:
        runs.append((ledger_id, first_entry_id, data))

    last = entry_reader._scan_offloaded(offloader, uid, Position(7, 1), 4, visit)
    assert last == 4
    assert [entry for run in runs for entry in run[2]] == [b"entry-%d" % i for i in range(1, 5)]
    assert [run[1] for run in runs] == [1, 3]  # ten bytes a read: two entries each
    assert all(run[0] == 7 for run in runs)
