"""The filesystem offloader's copies: self-describing, atomic, read back exactly."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.errors import ConfigError, StorageError
from dedup_broker.storage import formats
from dedup_broker.storage.ledger.offloads import over_threshold
from dedup_broker.storage.offload.filesystem import (
    FilesystemOffloader,
    offload_directory,
    offloader_from_config,
)
from dedup_broker.storage.service.kafka_storage import KafkaStorage
from dedup_broker.storage.values import Entry, LedgerInfo, OffloadedHeader, OffloadInfo, Position


def _header(ledger_id: int, uid: str, entries: int) -> OffloadedHeader:
    return OffloadedHeader(
        ledger_id, "public/default/persistent/t", "MANAGED_LEDGER", "", uid, entries, 0, 1, "b", "c"
    )


def _entries(ledger_id: int, count: int) -> list[Entry]:
    return [Entry(Position(ledger_id, i), b"m-%d" % i * (i + 1), 1000 + i) for i in range(count)]


def test_a_copy_reads_back_exactly_and_names_its_ledger(tmp_path: Path) -> None:
    offloader = FilesystemOffloader(tmp_path, "c")
    uid = str(uuid.uuid4())
    writer = offloader.begin(_header(7, uid, 10))
    writer.add(_entries(7, 4))
    assert offloader.copies()[0].temporary  # not visible as a complete copy yet
    writer.add(_entries(7, 10)[4:])
    path = writer.finish()
    assert [c.temporary for c in offloader.copies()] == [False]
    assert offloader.read_header(path) == _header(7, uid, 10)
    assert offloader.read(7, uid, 0, 100, 1 << 20) == _entries(7, 10)
    assert offloader.read(7, uid, 3, 2, 1 << 20) == _entries(7, 10)[3:5]
    assert len(offloader.read(7, uid, 2, 100, 1)) == 1  # at least one entry
    assert offloader.first_at_or_after(7, uid, 1004) == 4
    assert offloader.first_at_or_after(7, uid, 5000) == -1
    assert offloader.delete(7, uid) and not offloader.delete(7, uid)
    assert offloader.copies() == []


def test_an_incomplete_copy_is_never_made_visible(tmp_path: Path) -> None:
    offloader = FilesystemOffloader(tmp_path, "c")
    uid = str(uuid.uuid4())
    writer = offloader.begin(_header(3, uid, 5))
    writer.add(_entries(3, 4))
    with pytest.raises(StorageError):
        writer.finish()
    assert offloader.copies() == []


def test_configuration(tmp_path: Path) -> None:
    config = BrokerConfig.load(environ={})
    assert offload_directory(config) is None
    on = config.with_overrides(
        managedLedgerOffloadDriver="filesystem", fileSystemURI=f"file://{tmp_path}"
    )
    assert offload_directory(on) == tmp_path
    with pytest.raises(ConfigError):
        offload_directory(config.with_overrides(managedLedgerOffloadDriver="filesystem"))
    with pytest.raises(ConfigError):
        offloader_from_config(
            config.with_overrides(managedLedgerOffloadDriver="aws-s3", fileSystemURI="/x")
        )


def test_threshold_keeps_the_newest_bytes_in_kafka() -> None:
    done = OffloadInfo("u", complete=True)
    ledgers = [
        LedgerInfo(1, 5, 100, 1, done),
        LedgerInfo(2, 5, 100, 1),
        LedgerInfo(3, 0, 0, 1),
        LedgerInfo(4, 5, 100, 1),
        LedgerInfo(5, 5, 100, 1),
        LedgerInfo(6, -1, 50, 0),
    ]
    assert over_threshold(ledgers, -1) == []
    assert over_threshold(ledgers, 0) == [2, 4, 5]
    assert over_threshold(ledgers, 150) == [2, 4]
    assert over_threshold(ledgers, 250) == [2]
    assert over_threshold(ledgers, 1000) == []


def test_age_threshold_offloads_ledgers_closed_long_enough_ago() -> None:
    ledgers = [
        LedgerInfo(1, 5, 100, 1_000),
        LedgerInfo(2, 5, 100, 5_000),
        LedgerInfo(3, 0, 0, 1_000),  # empty: never offloaded
        LedgerInfo(4, 5, 100, 9_000),
        LedgerInfo(5, -1, 50, 0),  # open: never offloaded
    ]
    assert over_threshold(ledgers, -1, -1, now_ms=10_000) == []
    assert over_threshold(ledgers, -1, 0, now_ms=10_000) == [1, 2, 4]
    assert over_threshold(ledgers, -1, 5, now_ms=10_000) == [1, 2]
    # Either rule is enough: the size rule adds ledger 2 to what age chose.
    assert over_threshold(ledgers, 150, 8, now_ms=10_000) == [1, 2]


def test_offload_state_round_trips_in_the_ledger_list() -> None:
    uid = str(uuid.uuid4())
    info = LedgerInfo(4, 5, 100, 9, OffloadInfo(uid, True, True, 77, "filesystem"))
    record = formats.ManagedLedgerRecord([info, LedgerInfo(5, -1, 0, 0)])
    decoded = formats.decode_managed_ledger_info(formats.encode_managed_ledger_info(record))
    assert decoded.ledgers == record.ledgers
    assert formats.uid_from_longs(*formats.uid_to_longs(uid)) == uid


def test_a_broker_with_a_bad_offload_setting_fails_before_touching_kafka() -> None:
    config = BrokerConfig.load(
        environ={},
        overrides={
            "kafkaBootstrapServers": "127.0.0.1:1",  # nothing listens: must not be reached
            "managedLedgerOffloadDriver": "aws-s3",
            "fileSystemURI": "/x",
        },
    )
    with pytest.raises(ConfigError, match="not supported"):
        asyncio.run(asyncio.wait_for(KafkaStorage.start(config), 5))
