"""Entries read back into the source's record batches: every message of the planned
range, with its columns, and nothing outside it."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.arrow_entries import MessageColumns, batch_block, encode_records
from connectors.arrow_messages import SourceBatches, message_span
from connectors.datasource_offsets import is_after, is_through
from connectors.datasource_reader import arrow_schema
from connectors.positions import NOTHING, Position
from dedup_broker.protocol import encode_message
from dedup_broker.protocol import pulsar_api_pb2 as pb

TOPIC = "persistent://public/default/t-partition-2"
positions = st.builds(Position, st.integers(1, 2), st.integers(0, 3), st.integers(-1, 4)) | st.just(
    NOTHING
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2), st.integers(0, 3), st.integers(1, 5), positions, positions)
def test_an_entry_contributes_exactly_the_messages_in_the_range(
    ledger: int, entry: int, count: int, start: Position, end: Position
) -> None:
    first, stop = message_span(ledger, entry, count, start, end)
    inside = [
        i
        for i in range(count)
        if is_after(Position(ledger, entry, i), start)
        and is_through(Position(ledger, entry, i), end)
    ]
    assert list(range(first, stop)) == inside


def batch_entry(values: list[bytes], keys: list[bytes | None], producer: str) -> bytes:
    columns = MessageColumns(
        values=pa.array(values, pa.binary()),
        keys=pa.array(keys, pa.binary()),
        event_times=np.array([1_000 * (i + 1) for i in range(len(values))], dtype=np.uint64),
    )
    records = encode_records(columns, np.arange(len(values), dtype=np.uint64))
    payload = records.payload(0, len(records))
    return batch_block(producer, 0, len(values) - 1, len(values), payload, pb.ZLIB, 1_700_000)


def single_entry(value: bytes) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="solo", sequence_id=4, publish_time=1_800_000, partition_key="one"
    )
    metadata.properties.add(key="p", value="v")
    return encode_message(metadata, value)


def test_a_range_is_cut_inside_its_first_and_last_entries() -> None:
    entries = [
        (3, 0, batch_entry([b"a0", b"a1", b"a2"], [b"k", None, b""], "batcher")),
        (3, 1, single_entry(b"b")),
        (3, 2, batch_entry([b"c0", b"c1", b"c2"], [None, None, None], "batcher")),
        (4, 0, batch_entry([b"after"], [None], "batcher")),
    ]
    batches = SourceBatches(TOPIC, 2, Position(3, 0, 0), Position(3, 2, 1), arrow_schema())
    for ledger, entry, block in entries[:3]:
        assert not batches.done
        batches.add(ledger, entry, block)
    assert batches.done
    rows = batches.take().to_pylist()
    assert [r["value"] for r in rows] == [b"a1", b"a2", b"b", b"c0", b"c1"]
    assert [r["message_id"] for r in rows] == ["3:0:1", "3:0:2", "3:1:-1", "3:2:0", "3:2:1"]
    assert [r["key"] for r in rows] == [None, None, "one", None, None]
    assert rows[2]["properties"] == [("p", "v")] and rows[0]["properties"] == []
    assert [r["producer_name"] for r in rows] == [
        "batcher",
        "batcher",
        "solo",
        "batcher",
        "batcher",
    ]
    utc = dt.UTC
    assert rows[0]["publish_time"] == dt.datetime.fromtimestamp(1_700, utc)
    assert rows[2]["publish_time"] == dt.datetime.fromtimestamp(1_800, utc)
    assert [r["event_time"] for r in rows] == [
        dt.datetime.fromtimestamp(2, utc),
        dt.datetime.fromtimestamp(3, utc),
        None,
        dt.datetime.fromtimestamp(1, utc),
        dt.datetime.fromtimestamp(2, utc),
    ]
    assert {(r["topic"], r["partition"]) for r in rows} == {(TOPIC, 2)}
    assert batches.rows == 0


def test_a_whole_entry_as_the_end_takes_all_its_messages() -> None:
    batches = SourceBatches(TOPIC, 2, NOTHING, Position(5, 7, -1), arrow_schema())
    batches.add(5, 7, batch_entry([b"x", b"y"], [None, None], "p"))
    assert batches.done
    assert batches.take().column("value").to_pylist() == [b"x", b"y"]
