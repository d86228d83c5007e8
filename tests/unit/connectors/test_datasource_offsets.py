"""Offsets of the dedup-broker data source: after / through at entry and batch level,
startingOffsets, the read-limit share, topic options."""

from __future__ import annotations

import json

import pytest

from connectors.datasource_offsets import (
    decode,
    encode,
    has_messages,
    is_after,
    is_through,
    parse_topics,
    reaches,
    share,
    starting_positions,
)
from connectors.positions import NOTHING, Position

T = "persistent://public/default/t"


def test_after_and_through_inside_a_batch_and_for_whole_entries() -> None:
    assert is_after(Position(1, 5, 2), Position(1, 5, 1))
    assert not is_after(Position(1, 5, 1), Position(1, 5, 1))
    assert not is_after(Position(1, 5, 3), Position(1, 5, -1)), "-1 covers the whole entry"
    assert is_after(Position(1, 6, -1), Position(1, 5, 7))
    assert is_after(Position(2, 0, -1), Position(1, 9, -1))
    assert is_after(Position(0, 0, -1), NOTHING)
    assert is_through(Position(1, 5, 3), Position(1, 5, -1))
    assert is_through(Position(1, 5, 2), Position(1, 5, 2))
    assert not is_through(Position(1, 5, 3), Position(1, 5, 2))
    assert not is_through(Position(1, 6, -1), Position(1, 5, 9))
    assert not is_through(Position(0, 0, -1), NOTHING)
    assert reaches(Position(1, 5, 2), Position(1, 5, 2))
    assert not reaches(Position(1, 5, 2), Position(1, 5, -1))
    assert reaches(Position(1, 5, -1), Position(1, 5, -1))
    assert has_messages(NOTHING, Position(1, 0, -1))
    assert not has_messages(Position(1, 0, -1), Position(1, 0, -1))
    assert not has_messages(NOTHING, NOTHING)


def test_offsets_round_trip_as_json() -> None:
    positions = {T: Position(3, 4, 5), T + "-x": NOTHING}
    encoded = encode(positions)
    assert decode(json.loads(json.dumps(encoded))) == positions
    assert encoded[T] == {"ledgerId": 3, "entryId": 4, "batchIndex": 5}


def test_starting_offsets() -> None:
    parts = [T + "-partition-0", T + "-partition-1"]
    latest = {parts[0]: Position(1, 2, -1), parts[1]: Position(1, 7, 3)}
    assert starting_positions(None, parts, latest) == dict.fromkeys(parts, NOTHING)
    assert starting_positions("latest", parts, latest) == latest
    given = json.dumps({parts[1]: {"ledgerId": 1, "entryId": 3, "batchIndex": 0}})
    assert starting_positions(given, parts, latest) == {
        parts[0]: NOTHING,
        parts[1]: Position(1, 3, 0),
    }
    given = json.dumps({parts[0]: "latest", parts[1]: "1:2"})
    assert starting_positions(given, parts, latest) == {
        parts[0]: Position(1, 2, -1),
        parts[1]: Position(1, 2, -1),
    }
    with pytest.raises(ValueError, match="not read"):
        starting_positions(json.dumps({T + "-other": "1:2"}), parts, latest)
    with pytest.raises(ValueError):
        starting_positions("soon", parts, latest)


def test_share_and_topics() -> None:
    assert share(7, ["a", "b", "c"]) == {"a": 3, "b": 2, "c": 2}
    assert share(1, ["a", "b"]) == {"a": 1, "b": 0}
    assert parse_topics("t", None) == [T]
    assert parse_topics(None, "t, tenant/ns/u ,persistent://a/b/c") == [
        T,
        "persistent://tenant/ns/u",
        "persistent://a/b/c",
    ]
    with pytest.raises(ValueError):
        parse_topics("t", "u")
