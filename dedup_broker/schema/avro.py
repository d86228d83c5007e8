"""Avro schema definitions and Avro's schema resolution rules: can a reader read a writer's data.

Pulsar's AVRO and JSON schemas carry an Avro schema definition (JSON text); their
compatibility is decided as Pulsar decides it, with Avro's resolving grammar (what Avro's
``SchemaValidator`` runs, not its stricter ``SchemaCompatibility``):

- primitives read their own type; promotions: int -> long, float, double; long -> float,
  double; float -> double; string <-> bytes;
- records resolve by structure (their names are not compared): each reader field takes
  the writer field of its name and must read it, or has a default (``null`` included);
  writer fields the reader does not have are skipped; aliases play no part;
- enums match by full name (their symbols are not compared); fixed types by full name and
  size; arrays by items, maps by values;
- a writer union is read when every branch is; a reader union reads a writer through the
  one branch Avro picks (the writer's type, a named type's full name or a record's
  structure, else a promotion).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dedup_broker.errors import PermanentError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
"""Writer type -> reader types that read it besides itself."""


class InvalidAvroSchemaError(PermanentError):
    """A text that is not a valid Avro schema definition."""


@dataclass(eq=False)
class Primitive:
    name: str


@dataclass(eq=False)
class Field:
    name: str
    type: AvroType
    has_default: bool
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class Record:
    full_name: str
    aliases: tuple[str, ...]
    fields: list[Field] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.full_name.rpartition(".")[2]


@dataclass(eq=False)
class Enum:
    full_name: str
    aliases: tuple[str, ...]
    symbols: tuple[str, ...]
    default: str | None

    @property
    def name(self) -> str:
        return self.full_name.rpartition(".")[2]


@dataclass(eq=False)
class Fixed:
    full_name: str
    aliases: tuple[str, ...]
    size: int

    @property
    def name(self) -> str:
        return self.full_name.rpartition(".")[2]


@dataclass(eq=False)
class Array:
    items: AvroType


@dataclass(eq=False)
class Map:
    values: AvroType


@dataclass(eq=False)
class Union:
    branches: tuple[AvroType, ...]


AvroType = Primitive | Record | Enum | Fixed | Array | Map | Union
Named = Record | Enum | Fixed


def parse_schema(text: str | bytes) -> AvroType:
    """The schema a definition describes; raises ``InvalidAvroSchemaError``."""
    try:
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidAvroSchemaError(f"not a JSON schema definition: {exc}") from None
    return _Parser().parse(document, "")


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, Named] = {}

    def parse(self, node: Any, namespace: str) -> AvroType:
        if isinstance(node, str):
            return self._reference(node, namespace)
        if isinstance(node, list):
            return Union(tuple(self.parse(branch, namespace) for branch in node))
        if not isinstance(node, dict):
            raise InvalidAvroSchemaError(f"unexpected schema element {node!r}")
        kind = node.get("type")
        if isinstance(kind, (dict, list)):
            return self.parse(kind, namespace)
        if not isinstance(kind, str):
            raise InvalidAvroSchemaError(f"schema element without a type: {node!r}")
        if kind in PRIMITIVES:  # possibly with a logicalType: read as its base type
            return Primitive(kind)
        if kind == "array":
            return Array(self.parse(self._required(node, "items"), namespace))
        if kind == "map":
            return Map(self.parse(self._required(node, "values"), namespace))
        if kind in ("record", "error"):
            return self._record(node, namespace)
        if kind == "enum":
            symbols = self._required(node, "symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise InvalidAvroSchemaError(f"enum symbols must be strings: {symbols!r}")
            full_name, aliases = self._names(node, namespace)
            default = node.get("default")
            enum = Enum(full_name, aliases, tuple(symbols), default if default else None)
            return self._define(enum)
        if kind == "fixed":
            size = self._required(node, "size")
            if not isinstance(size, int):
                raise InvalidAvroSchemaError(f"fixed size must be a number: {size!r}")
            full_name, aliases = self._names(node, namespace)
            return self._define(Fixed(full_name, aliases, size))
        return self._reference(kind, namespace)

    @staticmethod
    def _required(node: dict[str, Any], key: str) -> Any:
        if key not in node:
            raise InvalidAvroSchemaError(f"{node.get('type')} without {key!r}: {node!r}")
        return node[key]

    def _names(self, node: dict[str, Any], namespace: str) -> tuple[str, tuple[str, ...]]:
        name = self._required(node, "name")
        if not isinstance(name, str) or not name:
            raise InvalidAvroSchemaError(f"invalid name {name!r}")
        own_namespace = node.get("namespace")
        if "." not in name and isinstance(own_namespace, str):
            namespace = own_namespace
        full_name = name if "." in name or not namespace else f"{namespace}.{name}"
        space = full_name.rpartition(".")[0]
        aliases = tuple(
            a if "." in a or not space else f"{space}.{a}"
            for a in node.get("aliases", ())
            if isinstance(a, str)
        )
        return full_name, aliases

    def _define(self, named: Named) -> Named:
        if named.full_name in self.named:
            raise InvalidAvroSchemaError(f"{named.full_name} is defined twice")
        self.named[named.full_name] = named
        return named

    def _reference(self, name: str, namespace: str) -> AvroType:
        if name in PRIMITIVES:
            return Primitive(name)
        for candidate in (f"{namespace}.{name}" if namespace else name, name):
            if candidate in self.named:
                return self.named[candidate]
        raise InvalidAvroSchemaError(f"unknown type {name!r}")

    def _record(self, node: dict[str, Any], namespace: str) -> Record:
        full_name, aliases = self._names(node, namespace)
        record = Record(full_name, aliases)
        self._define(record)
        fields = self._required(node, "fields")
        if not isinstance(fields, list):
            raise InvalidAvroSchemaError(f"record {full_name} fields must be a list")
        space = full_name.rpartition(".")[0]
        seen: set[str] = set()
        for item in fields:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise InvalidAvroSchemaError(f"invalid field of {full_name}: {item!r}")
            name = item["name"]
            if name in seen:
                raise InvalidAvroSchemaError(f"field {name} of {full_name} is defined twice")
            seen.add(name)
            field_type = self.parse(self._required(item, "type"), space)
            field_aliases = tuple(a for a in item.get("aliases", ()) if isinstance(a, str))
            record.fields.append(Field(name, field_type, "default" in item, field_aliases))
        return record


def can_read(reader: AvroType, writer: AvroType) -> bool:
    """Whether data written with ``writer`` can be read with ``reader``."""
    return _Resolver().can_read(reader, writer)


def incompatibilities(reader: AvroType, writer: AvroType) -> list[str]:
    """Why ``reader`` cannot read ``writer``'s data (empty when it can)."""
    resolver = _Resolver()
    resolver.can_read(reader, writer)
    return resolver.reasons


class _Resolver:
    """Avro's ``ResolvingGrammarGenerator`` as Pulsar's compatibility check runs it (through
    Avro's ``SchemaValidator``): records resolve by structure whatever their names, enums
    and fixed types by full name (enum symbols are not compared), a reader union reads a
    writer through its one best branch."""

    def __init__(self) -> None:
        self._results: dict[tuple[int, int], bool | None] = {}
        """Pairs checked (``None``: being checked, a recursive type: assumed to match)."""
        self.reasons: list[str] = []

    def _no(self, reason: str) -> bool:
        self.reasons.append(reason)
        return False

    def can_read(self, reader: AvroType, writer: AvroType) -> bool:
        if isinstance(writer, Union):
            return all([self.can_read(reader, branch) for branch in writer.branches])
        if isinstance(reader, Union):
            branch = self._best_branch(reader, writer)
            if branch is None:
                return self._no(f"no branch of a reader union reads {describe(writer)}")
            return self.can_read(branch, writer)
        key = (id(reader), id(writer))
        if key in self._results:
            known = self._results[key]
            return True if known is None else known
        self._results[key] = None
        result = self._resolve(reader, writer)
        self._results[key] = result
        return result

    def _resolve(self, reader: AvroType, writer: AvroType) -> bool:
        if isinstance(reader, Primitive) and isinstance(writer, Primitive):
            if reader.name == writer.name or reader.name in PROMOTIONS.get(writer.name, ()):
                return True
            return self._no(f"{writer.name} cannot be read as {reader.name}")
        if isinstance(reader, Array) and isinstance(writer, Array):
            return self.can_read(reader.items, writer.items)
        if isinstance(reader, Map) and isinstance(writer, Map):
            return self.can_read(reader.values, writer.values)
        if isinstance(reader, Record) and isinstance(writer, Record):
            return self._record(reader, writer)
        if isinstance(reader, Enum) and isinstance(writer, Enum):
            if reader.full_name != writer.full_name:
                return self._no(f"enum {writer.full_name} cannot be read as {reader.full_name}")
            return True
        if isinstance(reader, Fixed) and isinstance(writer, Fixed):
            if reader.full_name != writer.full_name or reader.size != writer.size:
                return self._no(f"{describe(writer)} cannot be read as {describe(reader)}")
            return True
        return self._no(f"{describe(writer)} cannot be read as {describe(reader)}")

    def _record(self, reader: Record, writer: Record) -> bool:
        written = {f.name: f for f in writer.fields}
        for reader_field in reader.fields:
            if reader_field.name not in written and not reader_field.has_default:
                return self._no(
                    f"field {reader.name}.{reader_field.name} is missing and has no default"
                )
        compatible = True
        for reader_field in reader.fields:
            source = written.get(reader_field.name)
            if source is not None and not self.can_read(reader_field.type, source.type):
                compatible = self._no(f"field {reader.name}.{reader_field.name} changed its type")
        return compatible

    def _best_branch(self, reader: Union, writer: AvroType) -> AvroType | None:
        """Avro's choice: the first branch of the writer's kind (named types: of its full
        name, else, for records, the first whose structure reads it, preferring one of the
        same short name), then one the writer promotes to."""
        structure_match: AvroType | None = None
        for branch in reader.branches:
            if type(branch) is not type(writer):
                continue
            if isinstance(writer, Primitive) and isinstance(branch, Primitive):
                if branch.name == writer.name:
                    return branch
                continue
            if not isinstance(writer, (Record, Enum, Fixed)):
                return branch
            assert isinstance(branch, (Record, Enum, Fixed))
            if branch.full_name == writer.full_name:
                return branch
            if isinstance(writer, Record) and isinstance(branch, Record):
                quiet = _Resolver()
                quiet._results = dict(self._results)
                if quiet._record(branch, writer) and (
                    structure_match is None or branch.name == writer.name
                ):
                    structure_match = branch
        if structure_match is not None:
            return structure_match
        if isinstance(writer, Primitive):
            for branch in reader.branches:
                if isinstance(branch, Primitive) and branch.name in PROMOTIONS.get(writer.name, ()):
                    return branch
        return None


def describe(schema: AvroType) -> str:
    if isinstance(schema, Primitive):
        return schema.name
    if isinstance(schema, (Record, Enum, Fixed)):
        return f"{type(schema).__name__.lower()} {schema.full_name}"
    if isinstance(schema, Array):
        return "array"
    if isinstance(schema, Map):
        return "map"
    return "union"
