"""Producer names, sequence ids and partition choice for the Spark sink: pure functions.

Everything here must give the same answer when Spark replays a batch or a task, because
the broker's deduplication (PIP-6) recognises a replayed row only by the producer name
and sequence id it is sent with, on the same topic partition as before.
"""

from __future__ import annotations

import re

ROW_BITS = 32
"""Low bits of a batch-derived sequence id: the row's index in its Spark partition."""

MAX_ROWS_PER_PARTITION = 1 << ROW_BITS
MAX_BATCH_ID = (1 << (63 - ROW_BITS)) - 1
MAX_SEQUENCE_ID = (1 << 63) - 1
"""Pulsar compares sequence ids as signed 64-bit longs; negative ids are never stored."""

_NAME_PART = re.compile(r"[^A-Za-z0-9._:-]")


def batch_sequence_id(batch_id: int, row_index: int) -> int:
    """Sequence id of the ``row_index``-th row of a partition in micro-batch ``batch_id``.

    Ids rise with the row index inside a batch and with the batch id across batches, so
    one producer name can be reused by every batch.
    """
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise ValueError(f"batch id {batch_id} is outside 0..{MAX_BATCH_ID}")
    if not 0 <= row_index < MAX_ROWS_PER_PARTITION:
        raise ValueError(
            f"row index {row_index} is outside 0..{MAX_ROWS_PER_PARTITION - 1}: "
            "use more partitions (num_partitions)"
        )
    return (batch_id << ROW_BITS) | row_index


def split_batch_sequence_id(sequence_id: int) -> tuple[int, int]:
    """``(batch_id, row_index)`` of a batch-derived sequence id."""
    return sequence_id >> ROW_BITS, sequence_id & (MAX_ROWS_PER_PARTITION - 1)


def column_sequence_id(value: object) -> int:
    """A user column's value as a sequence id (e.g. a source offset)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"sequence column value {value!r} is not an integer")
    if not 0 <= value <= MAX_SEQUENCE_ID:
        raise ValueError(f"sequence id {value} is outside 0..{MAX_SEQUENCE_ID}")
    return value


def check_name(name: str) -> str:
    """A producer-name prefix: non-empty, and only characters that survive every client."""
    if not name or _NAME_PART.search(name):
        raise ValueError(f"name {name!r} must be non-empty and use only A-Z a-z 0-9 . _ : -")
    return name


def partition_producer_name(name: str, spark_partition: int) -> str:
    """Producer of one Spark partition of every batch (batch-derived sequence mode)."""
    return f"{name}-{spark_partition}"


def column_producer_name(name: str, value: object) -> str:
    """Producer of one value of the user's producer column (e.g. a source partition)."""
    if value is None:
        raise ValueError("producer column value is null")
    text = value.decode() if isinstance(value, bytes) else str(value)
    return f"{name}-{_NAME_PART.sub('_', text)}"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as Pulsar's ``JavaStringHash`` uses it."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def key_partition(key: str, partitions: int) -> int:
    """Topic partition of a message key, the way Pulsar's Java clients route it."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


def spark_partition_route(spark_partition: int, partitions: int) -> int:
    """Topic partition for all rows of one Spark partition (no key): one producer each."""
    return spark_partition % partitions


def column_route(value: object, partitions: int) -> int:
    """Topic partition named by a user column (an int index, taken modulo the count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"partition column value {value!r} is not an integer")
    return value % partitions
