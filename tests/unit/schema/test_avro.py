"""Avro's schema resolution rules, as the schema registry applies them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dedup_broker.schema.avro import (
    InvalidAvroSchemaError,
    can_read,
    incompatibilities,
    parse_schema,
)


def record(*fields: dict[str, Any], name: str = "User", **extra: Any) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields), **extra})


def reads(reader: str, writer: str) -> bool:
    return can_read(parse_schema(reader), parse_schema(writer))


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
EMAIL_NULLABLE = {"name": "email", "type": ["null", "string"], "default": None}


def test_identical_records_read_each_other() -> None:
    assert reads(record(NAME, AGE), record(NAME, AGE))


def test_added_field_needs_a_default_for_the_new_reader() -> None:
    old = record(NAME)
    assert reads(record(NAME, AGE_DEFAULT), old)
    assert not reads(record(NAME, AGE), old)
    assert reads(record(NAME, EMAIL_NULLABLE), old)


def test_removed_field_needs_a_default_for_the_old_reader() -> None:
    new = record(NAME)
    assert reads(new, record(NAME, AGE))  # the new reader skips the old field
    assert not reads(record(NAME, AGE), new)
    assert reads(record(NAME, AGE_DEFAULT), new)


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ],
)
def test_promotions(writer: str, reader: str) -> None:
    assert reads(json.dumps(reader), json.dumps(writer))


@pytest.mark.parametrize(
    ("writer", "reader"),
    [("long", "int"), ("double", "float"), ("string", "int"), ("boolean", "int")],
)
def test_no_narrowing(writer: str, reader: str) -> None:
    assert not reads(json.dumps(reader), json.dumps(writer))


def test_field_type_promotion_inside_a_record() -> None:
    assert reads(record({"name": "n", "type": "long"}), record({"name": "n", "type": "int"}))
    assert not reads(record({"name": "n", "type": "int"}), record({"name": "n", "type": "long"}))


def test_records_resolve_by_structure_not_by_name() -> None:
    """Pulsar checks with Avro's resolving grammar: a record's name (and namespace) is not
    compared, and aliases are not applied."""
    assert reads(record(NAME, name="Person"), record(NAME, name="User"))
    assert reads(record(NAME, namespace="a"), record(NAME, namespace="b"))
    renamed = record({"name": "full_name", "type": "string", "aliases": ["name"]})
    assert not reads(renamed, record(NAME))


def test_the_evolutions_pulsar_accepts() -> None:
    """The official client's cases: a record class evolved under another name with a
    nullable field made required (``FORWARD``), and defaults added to every field."""
    user1 = record(
        {"name": "name", "type": ["null", "string"]},
        {"name": "age", "type": ["null", "int"]},
        name="User1",
    )
    user2 = record(
        {"name": "age", "type": "int"},
        {"name": "name", "type": ["null", "string"]},
        name="User2",
    )
    assert reads(user1, user2) and not reads(user2, user1)
    plain = record({"name": "a", "type": ["null", "int"]}, {"name": "b", "type": "boolean"})
    defaults = record(
        {"name": "a", "type": ["null", "int"], "default": None},
        {"name": "b", "type": "boolean", "default": False},
        name="WithDefaults",
    )
    assert reads(plain, defaults) and reads(defaults, plain)


def test_unions() -> None:
    nullable = json.dumps(["null", "string"])
    assert reads(nullable, json.dumps("string"))
    assert not reads(json.dumps("string"), nullable)  # the writer may have written null
    assert reads(json.dumps(["null", "long", "string"]), json.dumps(["null", "int"]))
    assert not reads(json.dumps(["null", "int"]), json.dumps(["null", "int", "string"]))


def test_enums_match_by_full_name_and_any_symbols() -> None:
    """Avro's resolving grammar resolves unknown symbols when data is read, so Pulsar's
    check compares only the enum's full name."""
    small = json.dumps({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]})
    large = json.dumps({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]})
    other = json.dumps({"type": "enum", "name": "Shade", "symbols": ["RED", "GREEN"]})
    assert reads(large, small) and reads(small, large)
    assert not reads(other, small)


def test_fixed_arrays_and_maps() -> None:
    fixed4 = json.dumps({"type": "fixed", "name": "Id", "size": 4})
    fixed8 = json.dumps({"type": "fixed", "name": "Id", "size": 8})
    assert reads(fixed4, fixed4)
    assert not reads(fixed8, fixed4)
    assert reads(
        json.dumps({"type": "array", "items": "long"}),
        json.dumps({"type": "array", "items": "int"}),
    )
    assert not reads(
        json.dumps({"type": "map", "values": "int"}),
        json.dumps({"type": "map", "values": "string"}),
    )
    assert not reads(
        json.dumps({"type": "array", "items": "int"}), json.dumps({"type": "map", "values": "int"})
    )


def test_nested_and_referenced_records() -> None:
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    address2 = {
        "type": "record",
        "name": "Address",
        "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}],
    }
    old = record({"name": "home", "type": address}, {"name": "work", "type": "Address"})
    new = record({"name": "home", "type": address2}, {"name": "work", "type": "Address"})
    assert reads(old, new)
    assert not reads(new, old)  # zip has no default
    assert any(
        "zip" in reason for reason in incompatibilities(parse_schema(new), parse_schema(old))
    )


def test_recursive_records_terminate() -> None:
    node = record(
        {"name": "value", "type": "int"},
        {"name": "next", "type": ["null", "Node"], "default": None},
        name="Node",
    )
    node_long = record(
        {"name": "value", "type": "long"},
        {"name": "next", "type": ["null", "Node"], "default": None},
        name="Node",
    )
    assert reads(node, node)
    assert reads(node_long, node)
    assert not reads(node, node_long)


def test_logical_types_read_as_their_base_type() -> None:
    millis = json.dumps({"type": "long", "logicalType": "timestamp-millis"})
    assert reads(millis, json.dumps("long"))


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"type": "record", "name": "R"}),
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]}),
        json.dumps({"type": "enum", "name": "E", "symbols": [1]}),
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}] * 2}),
        json.dumps(42),
    ],
)
def test_invalid_definitions(text: str) -> None:
    with pytest.raises(InvalidAvroSchemaError):
        parse_schema(text)


def test_python_client_definitions() -> None:
    """What ``pulsar.schema.JsonSchema`` sends: nullable fields, a null default only with
    ``required_default=True``; the record is named after the class."""
    schema = pytest.importorskip("pulsar.schema")

    def definition(**fields: Any) -> str:
        user = type("User", (schema.Record,), fields)
        return str(schema.JsonSchema(user).schema_info().schema())

    v1 = parse_schema(definition(name=schema.String(), age=schema.Integer(required=True)))
    v2 = parse_schema(
        definition(
            name=schema.String(),
            age=schema.Integer(required=True),
            email=schema.String(required_default=True),
        )
    )
    v3 = parse_schema(definition(name=schema.String()))
    v4 = parse_schema(
        definition(name=schema.String(), age=schema.Integer(required=True), email=schema.String())
    )
    assert can_read(v2, v1) and can_read(v1, v2)
    assert can_read(v3, v1) and not can_read(v1, v3)  # age has no default
    assert not can_read(v4, v1)  # email has no default
