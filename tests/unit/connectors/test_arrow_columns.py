"""Columns taken from Arrow a column at a time give what the row-by-row path gives."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.arrow_columns import (
    event_millis,
    key_partitions,
    partition_values,
    producer_names,
    sequence_values,
    text,
)
from connectors.sink_ids import column_producer_name, column_route, key_partition
from connectors.sink_options import SinkDataError
from connectors.sink_writer import _millis


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30), min_size=1),
    st.integers(1, 64),
)
def test_keys_route_as_the_java_clients_do(keys: list[str], partitions: int) -> None:
    array = text(pa.array(["pad", *keys]), "key").slice(1)
    assert list(key_partitions(array, partitions)) == [key_partition(k, partitions) for k in keys]


def test_routing_by_key_needs_every_key() -> None:
    with pytest.raises(SinkDataError, match="non-null key"):
        key_partitions(pa.array([b"a", None], pa.binary()), 3)


def test_event_times_in_every_unit_are_epoch_milliseconds() -> None:
    moment = dt.datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    for unit in ("s", "ms", "us", "ns"):
        array = pa.array([moment, None], pa.timestamp(unit, tz="Europe/Berlin"))
        expected = _millis(array[0].as_py())
        assert list(event_millis(array)) == [expected, 0]
    wall_clock = dt.datetime(2025, 3, 1, 12, 30, 15)
    assert list(event_millis(pa.array([wall_clock], pa.timestamp("us")))) == [_millis(wall_clock)]
    assert list(event_millis(pa.array([1_700, None], pa.int64()))) == [1_700, 0]
    with pytest.raises(SinkDataError, match="timestamp or epoch millis"):
        event_millis(pa.array(["soon"]))
    with pytest.raises(SinkDataError, match="before 1970"):
        event_millis(pa.array([-5], pa.int64()))


def test_text_is_what_str_writes() -> None:
    assert text(pa.array([7, None, -3], pa.int32()), "k").to_pylist() == [b"7", None, b"-3"]
    assert text(pa.array([b"bytes"], pa.binary()), "k").to_pylist() == [b"bytes"]
    assert text(pa.array([True]), "k").to_pylist() == [b"True"]
    assert text(pa.array([1.5]), "k").to_pylist() == [b"1.5"]
    with pytest.raises(SinkDataError, match="utf-8"):
        text(pa.array([b"\xff"], pa.binary()), "key")


def test_producer_and_partition_columns() -> None:
    names, rows = producer_names(pa.array([3, 1, 3, 2]), "src")
    assert [names[i] for i in rows] == [column_producer_name("src", v) for v in (3, 1, 3, 2)]
    with pytest.raises(SinkDataError, match="null"):
        producer_names(pa.array(["a", None]), "src")
    routes = partition_values(pa.array([5, -1, 2], pa.int64()), 3)
    assert list(routes) == [column_route(v, 3) for v in (5, -1, 2)]


def test_sequence_columns_are_non_negative_integers() -> None:
    assert list(sequence_values(pa.array([0, 5, 2**63 - 1], pa.int64()))) == [0, 5, 2**63 - 1]
    for bad, match in (
        (pa.array([1, None], pa.int64()), "None"),
        (pa.array([-1], pa.int64()), "outside"),
        (pa.array([1.0]), "not integers"),
    ):
        with pytest.raises(SinkDataError, match=match):
            sequence_values(bad)
