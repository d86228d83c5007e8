"""Producer names, sequence ids and routing of the Spark sink are replay-stable."""

from __future__ import annotations

import pytest

from connectors.sink_ids import (
    MAX_BATCH_ID,
    MAX_ROWS_PER_PARTITION,
    batch_sequence_id,
    check_name,
    column_producer_name,
    column_route,
    column_sequence_id,
    java_string_hash,
    key_partition,
    partition_producer_name,
    spark_partition_route,
    split_batch_sequence_id,
)


def test_batch_sequence_ids_rise_within_a_batch_and_across_batches() -> None:
    ids = [batch_sequence_id(b, i) for b in range(3) for i in (0, 1, 2, MAX_ROWS_PER_PARTITION - 1)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert batch_sequence_id(7, 5) == batch_sequence_id(7, 5)
    assert split_batch_sequence_id(batch_sequence_id(7, 5)) == (7, 5)


def test_batch_sequence_ids_stay_positive_signed_longs() -> None:
    highest = batch_sequence_id(MAX_BATCH_ID, MAX_ROWS_PER_PARTITION - 1)
    assert highest == (1 << 63) - 1
    with pytest.raises(ValueError):
        batch_sequence_id(MAX_BATCH_ID + 1, 0)
    with pytest.raises(ValueError):
        batch_sequence_id(0, MAX_ROWS_PER_PARTITION)
    with pytest.raises(ValueError):
        batch_sequence_id(-1, 0)


def test_column_sequence_ids_are_non_negative_integers() -> None:
    assert column_sequence_id(0) == 0
    assert column_sequence_id(12345) == 12345
    for bad in (-1, 1 << 63, "5", 1.0, None, True):
        with pytest.raises(ValueError):
            column_sequence_id(bad)


def test_producer_names() -> None:
    assert partition_producer_name("orders", 3) == "orders-3"
    assert column_producer_name("orders", 2) == "orders-2"
    assert column_producer_name("orders", b"p/1") == "orders-p_1"
    assert column_producer_name("orders", "eu west") == "orders-eu_west"
    with pytest.raises(ValueError):
        column_producer_name("orders", None)
    assert check_name("query-1.v2") == "query-1.v2"
    for bad in ("", "a b", "x/y"):
        with pytest.raises(ValueError):
            check_name(bad)


def test_java_string_hash_matches_java() -> None:
    # Values of java.lang.String#hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair: two UTF-16 units


def test_routing_is_deterministic_and_in_range() -> None:
    for key in ("a", "hello", "polygenelubricants", "user-42"):
        partition = key_partition(key, 7)
        assert 0 <= partition < 7
        assert partition == key_partition(key, 7)
    assert key_partition("polygenelubricants", 5) == 0
    assert spark_partition_route(9, 4) == 1
    assert column_route(11, 4) == 3
    with pytest.raises(ValueError):
        column_route("1", 4)
