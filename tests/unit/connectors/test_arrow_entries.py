"""Batch entries built from Arrow columns are byte for byte what protobuf's own encoder
writes, and split back into the same messages."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.arrow_columns import map_properties, message_columns, text
from connectors.arrow_entries import (
    MessageColumns,
    batch_block,
    concat,
    constant_key_value_fields,
    encode_records,
)
from connectors.sink_options import Routing, SinkMode, WriterSpec
from dedup_broker.protocol import parse_message, split_batch, verify_checksum
from dedup_broker.protocol import pulsar_api_pb2 as pb

Row = tuple[bytes | None, str | None, dict[str, str | None] | None, int, int]
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),  # value
        st.one_of(st.none(), texts),  # key
        st.one_of(st.none(), st.dictionaries(texts, st.one_of(st.none(), texts), max_size=3)),
        st.integers(0, 2**45),  # event time (0: none)
        st.integers(0, 2**63 - 1),  # sequence id
    ),
    min_size=1,
    max_size=40,
)


def expected_record(
    value: bytes | None,
    key: str | None,
    properties: dict[str, str | None] | None,
    event_time: int,
    sequence_id: int,
) -> bytes:
    single = pb.SingleMessageMetadata(payload_size=len(value or b""), sequence_id=sequence_id)
    for name, text_value in (properties or {}).items():
        if text_value is not None:
            single.properties.add(key=name, value=text_value)
    if key is not None:
        single.partition_key = key
    if event_time:
        single.event_time = event_time
    encoded = single.SerializeToString()
    return len(encoded).to_bytes(4, "big") + encoded + (value or b"")


@settings(max_examples=60, deadline=None)
@given(rows)
def test_records_are_what_protobuf_writes(data: list[Row]) -> None:
    values, keys, maps, events, ids = zip(*data, strict=True)
    columns = MessageColumns(
        values=pa.array(values, pa.binary()),
        keys=text(pa.array(keys, pa.string()), "key"),
        properties=map_properties(
            pa.array(
                [None if m is None else list(m.items()) for m in maps],
                pa.map_(pa.string(), pa.string()),
            )
        ),
        event_times=np.array(events, dtype=np.uint64),
    )
    records = encode_records(columns, np.array(ids, dtype=np.uint64))
    assert records.payload(0, len(records)) == b"".join(expected_record(*row) for row in data)


def test_a_batch_entry_splits_into_its_messages() -> None:
    columns = MessageColumns(
        values=pa.array([b"a", None, b"c" * 200], pa.binary()),
        keys=pa.array([b"k", None, b""], pa.binary()),
        properties=concat(
            constant_key_value_fields("p", pa.array([b"1", None, None], pa.binary())),
            constant_key_value_fields("q", pa.array([None, None, b"3"], pa.binary())),
        ),
        event_times=np.array([5, 0, 7], dtype=np.uint64),
    )
    ids = np.array([(9 << 32) | 0, (9 << 32) | 1, (9 << 32) | 2], dtype=np.uint64)
    records = encode_records(columns, ids)
    for compression in (pb.NONE, pb.LZ4, pb.ZSTD):
        block = batch_block(
            "p-0", int(ids[0]), int(ids[-1]), 3, records.payload(0, 3), compression, 1_700
        )
        assert verify_checksum(block)
        parsed = parse_message(block)
        metadata = parsed.metadata
        assert (metadata.producer_name, metadata.sequence_id) == ("p-0", ids[0])
        assert (metadata.highest_sequence_id, metadata.num_messages_in_batch) == (ids[-1], 3)
        assert metadata.publish_time == 1_700
        messages = split_batch(metadata, parsed.payload)
        assert [m.payload for m in messages] == [b"a", b"", b"c" * 200]
        assert [m.metadata.sequence_id for m in messages] == list(ids)
        assert [dict((p.key, p.value) for p in m.metadata.properties) for m in messages] == [
            {"p": "1"},
            {},
            {"q": "3"},
        ]
        assert [m.metadata.HasField("partition_key") for m in messages] == [True, False, True]
        assert [m.metadata.event_time for m in messages] == [5, 0, 7]


def test_entries_hold_at_most_the_messages_and_bytes_allowed() -> None:
    values = pa.array([b"x" * size for size in (10, 10, 10, 500, 10, 10)], pa.binary())
    records = encode_records(MessageColumns(values), np.arange(6, dtype=np.uint64))
    sizes = np.diff(records.offsets)
    assert records.entry_ranges(2, 10_000) == [(0, 2), (2, 4), (4, 6)]
    ranges = records.entry_ranges(100, 60)
    assert ranges == [(0, 3), (3, 4), (4, 6)]  # a record over the limit goes alone
    assert all(sizes[a:b].sum() <= 60 or b - a == 1 for a, b in ranges)


def test_message_columns_follow_the_writer_spec() -> None:
    batch = pa.record_batch(
        [
            pa.array(["v1", None]),
            pa.array([1, None], pa.int64()),
            pa.array([[("a", "1")], None], pa.map_(pa.string(), pa.string())),
            pa.array([1_700_000_000_123_456, None], pa.timestamp("us", tz="UTC")),
        ],
        names=["value", "key", "properties", "event_time"],
    )
    spec = WriterSpec(
        service_url="pulsar://x:1",
        topic="t",
        mode=SinkMode.SEQUENCE,
        name="n",
        batch_id=0,
        routing=Routing.SPARK_PARTITION,
        value_index=0,
        key_index=1,
        properties_map_index=2,
        event_time_index=3,
    )
    columns = message_columns(spec, batch)
    assert columns.values.to_pylist() == [b"v1", None]
    assert columns.keys is not None and columns.keys.to_pylist() == [b"1", None]
    assert columns.event_times is not None and list(columns.event_times) == [1_700_000_000_123, 0]
    records = encode_records(columns, np.array([0, 1], dtype=np.uint64))
    messages = split_batch(
        pb.MessageMetadata(num_messages_in_batch=2), records.payload(0, len(records))
    )
    assert [(p.key, p.value) for p in messages[0].metadata.properties] == [("a", "1")]
    assert not messages[1].metadata.properties


@pytest.mark.parametrize("kind", [pa.int32(), pa.float64()])
def test_values_must_be_binary_or_text(kind: pa.DataType) -> None:
    from connectors.arrow_columns import payloads
    from connectors.sink_options import SinkDataError

    with pytest.raises(SinkDataError, match="binary or string"):
        payloads(pa.array([1], kind))
