"""Offsets of the ``dedup-broker`` Spark data source: pure functions, no Spark, no client.

An offset is, per topic partition (its full name, ``...-partition-N`` for partitioned
topics), the position of the **last message** a micro-batch covers; the next batch reads
strictly after it. ``NOTHING`` (``-1:-1:-1``) means no message yet. Offsets travel as
JSON-compatible dicts, which Spark writes to the query's checkpoint::

    {"persistent://public/default/t-partition-0":
        {"ledgerId": 12, "entryId": 40, "batchIndex": 3}}

Batch index -1 names a whole entry (a message that was not batched, or every message of a
batch): "after" it is after the entry, "through" it includes the entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from connectors.positions import NOTHING, Position

Offset = dict[str, dict[str, int]]
"""The dict Spark stores: partition topic -> ``{ledgerId, entryId, batchIndex}``."""

EARLIEST = "earliest"
LATEST = "latest"


def position_to_json(position: Position) -> dict[str, int]:
    return {
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "batchIndex": position.batch_index,
    }


def position_from_json(value: object) -> Position:
    """``{ledgerId, entryId[, batchIndex]}`` or ``"ledger:entry[:batch]"``."""
    if isinstance(value, str):
        parts = [int(p) for p in value.split(":")]
        if len(parts) not in (2, 3):
            raise ValueError(f"message id {value!r} is not 'ledger:entry[:batchIndex]'")
        return Position(*parts)
    if isinstance(value, Mapping):
        try:
            return Position(
                int(value["ledgerId"]), int(value["entryId"]), int(value.get("batchIndex", -1))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"message id {value!r} needs integer ledgerId and entryId") from exc
    raise ValueError(f"message id {value!r} is neither an object nor 'ledger:entry[:batch]'")


def encode(positions: Mapping[str, Position]) -> Offset:
    return {topic: position_to_json(positions[topic]) for topic in sorted(positions)}


def decode(offset: Mapping[str, Any]) -> dict[str, Position]:
    return {topic: position_from_json(value) for topic, value in offset.items()}


def _entry(position: Position) -> tuple[int, int]:
    return (position.ledger_id, position.entry_id)


def is_after(position: Position, start: Position) -> bool:
    """Whether a message at ``position`` comes strictly after ``start``."""
    if start.is_before_everything:
        return True
    if _entry(position) != _entry(start):
        return _entry(position) > _entry(start)
    return start.batch_index >= 0 and position.batch_index > start.batch_index


def is_through(position: Position, end: Position) -> bool:
    """Whether a message at ``position`` is at or before ``end`` (inclusive)."""
    if end.is_before_everything:
        return False
    if _entry(position) != _entry(end):
        return _entry(position) < _entry(end)
    return end.batch_index < 0 or position.batch_index <= end.batch_index


def reaches(position: Position, end: Position) -> bool:
    """Whether ``position`` is the last message up to ``end`` (nothing more to read)."""
    if _entry(position) != _entry(end):
        return _entry(position) > _entry(end)
    if end.batch_index < 0:
        return position.batch_index < 0  # a message that was not batched is its whole entry
    return position.batch_index >= end.batch_index


def has_messages(start: Position, end: Position) -> bool:
    """Whether ``(start, end]`` may hold a message."""
    if end.is_before_everything or end.entry_id < 0:
        return False
    return is_after(end, start)


def starting_positions(
    option: str | None, partitions: Sequence[str], latest: Mapping[str, Position]
) -> dict[str, Position]:
    """Positions to read after, from ``startingOffsets``.

    ``earliest`` (default), ``latest``, or JSON ``{topic: id}`` where a topic is a partition's
    full name (or, for a non-partitioned topic, its name) and an id is
    ``{"ledgerId", "entryId", "batchIndex"}``, ``"ledger:entry[:batch]"``, ``"earliest"`` or
    ``"latest"``. Reading starts **after** the given id: the same meaning as the query's own
    offsets, so an ``endOffset`` of a query's progress resumes after it. Partitions the JSON
    does not name start from the earliest message.
    """
    text = (option or EARLIEST).strip()
    if text.lower() == EARLIEST:
        return dict.fromkeys(partitions, NOTHING)
    if text.lower() == LATEST:
        return {p: latest.get(p, NOTHING) for p in partitions}
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"startingOffsets must be 'earliest', 'latest' or JSON, not {text!r}"
        ) from exc
    if not isinstance(given, dict):
        raise ValueError("startingOffsets JSON must be an object {topic partition: message id}")
    unknown = sorted(set(given) - set(partitions))
    if unknown:
        raise ValueError(f"startingOffsets names partitions that are not read: {unknown}")
    result: dict[str, Position] = {}
    for partition in partitions:
        value = given.get(partition, EARLIEST)
        if isinstance(value, str) and value.lower() == EARLIEST:
            result[partition] = NOTHING
        elif isinstance(value, str) and value.lower() == LATEST:
            result[partition] = latest.get(partition, NOTHING)
        else:
            result[partition] = position_from_json(value)
    return result


def share(limit: int, partitions: Sequence[str]) -> dict[str, int]:
    """Split ``limit`` rows evenly over partitions (the first ones get the remainder)."""
    if not partitions:
        return {}
    base, extra = divmod(limit, len(partitions))
    return {p: base + (1 if i < extra else 0) for i, p in enumerate(partitions)}


def parse_topics(topic: str | None, topics: str | None) -> list[str]:
    """The ``topic`` / ``topics`` options as a list of fully qualified names."""
    if bool(topic) == bool(topics):
        raise ValueError("set exactly one of the options 'topic' and 'topics'")
    raw = [topic] if topic else (topics or "").split(",")
    names = [qualify(t.strip()) for t in raw if t.strip()]
    if not names:
        raise ValueError("no topic given")
    return list(dict.fromkeys(names))


def qualify(topic: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic`` (as Pulsar's clients do)."""
    if "://" in topic:
        return topic
    if topic.count("/") == 2:
        return f"persistent://{topic}"
    if "/" not in topic:
        return f"persistent://public/default/{topic}"
    raise ValueError(f"topic {topic!r} is neither 'name', 'tenant/ns/name' nor a full name")
