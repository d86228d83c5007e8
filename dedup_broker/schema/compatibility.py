"""Schemas as Pulsar knows them (type, data, properties) and its compatibility strategies.

A new schema is checked against the latest version (``BACKWARD``, ``FORWARD``, ``FULL``)
or against every version (the ``*_TRANSITIVE`` strategies):

- ``BACKWARD``: the new schema reads data written with the existing one;
- ``FORWARD``: the existing schema reads data written with the new one;
- ``FULL``: both; ``ALWAYS_COMPATIBLE`` accepts anything (another type too),
  ``ALWAYS_INCOMPATIBLE`` refuses every schema that is not already registered.

A schema of another type than the existing one is incompatible. AVRO and JSON schemas
are compared by Avro's resolution rules (``avro.py``); schemas of other types are
compatible with any schema of their type.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dedup_broker.errors import PermanentError
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.schema.avro import InvalidAvroSchemaError, incompatibilities, parse_schema


class IncompatibleSchemaError(PermanentError):
    """The schema may not be registered on the topic (``IncompatibleSchema``)."""


class InvalidSchemaError(IncompatibleSchemaError):
    """The schema's definition cannot be read (an AVRO schema that is not valid Avro)."""


class SchemaNotFoundError(PermanentError):
    """The topic has no schema (or not that version)."""


class CompatibilityStrategy(enum.StrEnum):
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, text: str) -> CompatibilityStrategy:
        try:
            return cls(text.strip().strip('"').upper())
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise InvalidStrategyError(
                f"unknown schema compatibility strategy {text!r} (one of {names})"
            ) from None

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


class InvalidStrategyError(PermanentError):
    """A compatibility strategy Pulsar does not know."""


class SchemaType(enum.StrEnum):
    """Pulsar's ``SchemaType`` names (as the admin API spells them) and their wire values."""

    NONE = "NONE"
    STRING = "STRING"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"
    AVRO = "AVRO"
    BOOLEAN = "BOOLEAN"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    DATE = "DATE"
    TIME = "TIME"
    TIMESTAMP = "TIMESTAMP"
    KEY_VALUE = "KEY_VALUE"
    INSTANT = "INSTANT"
    LOCAL_DATE = "LOCAL_DATE"
    LOCAL_TIME = "LOCAL_TIME"
    LOCAL_DATE_TIME = "LOCAL_DATE_TIME"
    PROTOBUF_NATIVE = "PROTOBUF_NATIVE"
    AUTO_CONSUME = "AUTO_CONSUME"
    BYTES = "BYTES"

    @property
    def wire(self) -> int:
        """The ``Schema.Type`` value (``BYTES`` travels as ``None``, as Pulsar sends it)."""
        return 0 if self is SchemaType.BYTES else _ORDER.index(self)

    @classmethod
    def of_wire(cls, value: int) -> SchemaType:
        if 0 <= value < len(_ORDER):
            return _ORDER[value]
        raise InvalidSchemaError(f"unknown schema type {value}")

    @classmethod
    def parse(cls, text: str) -> SchemaType:
        try:
            return cls(text.strip().upper())
        except ValueError:
            raise InvalidSchemaError(f"unknown schema type {text!r}") from None

    @property
    def avro_based(self) -> bool:
        return self in (SchemaType.AVRO, SchemaType.JSON)


_ORDER: tuple[SchemaType, ...] = tuple(SchemaType)[:-1]
"""Wire order: ``Schema.Type`` numbers 0 (NONE) to 21 (AUTO_CONSUME)."""


@dataclass(frozen=True)
class SchemaInfo:
    """A schema as a client or the admin API gives it."""

    type: SchemaType
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_wire(cls, schema: pb.Schema) -> SchemaInfo:
        # The stubs mistake Schema's KeyValue (properties) for Schema.Type.KeyValue.
        properties: Any = schema.properties
        return cls(
            SchemaType.of_wire(schema.type),
            bytes(schema.schema_data),
            {str(p.key): str(p.value) for p in properties},
        )

    def to_wire(self, name: str) -> pb.Schema:
        schema = pb.Schema(name=name, schema_data=self.data, type=self.type.wire)  # type: ignore[arg-type]
        properties: Any = schema.properties
        for key, value in sorted(self.properties.items()):
            properties.add(key=key, value=value)
        return schema

    def same_as(self, other: SchemaInfo) -> bool:
        """One schema: same type and definition (Pulsar's schema hash ignores properties)."""
        return self.type is other.type and self.data == other.data

    @property
    def has_schema(self) -> bool:
        """Whether it says anything (``NONE``/``BYTES``: raw bytes, ``AUTO_CONSUME``: the
        consumer takes whatever schema the topic has)."""
        return self.type not in (SchemaType.NONE, SchemaType.BYTES, SchemaType.AUTO_CONSUME)


def validate(schema: SchemaInfo) -> None:
    """An AVRO definition must be valid Avro (JSON ones may be other JSON schema texts)."""
    if schema.type is SchemaType.AVRO:
        try:
            parse_schema(schema.data)
        except InvalidAvroSchemaError as exc:
            raise InvalidSchemaError(f"invalid AVRO schema definition: {exc}") from None


def check_compatible(
    new: SchemaInfo, existing: Sequence[SchemaInfo], strategy: CompatibilityStrategy
) -> None:
    """Raises ``IncompatibleSchemaError`` when ``new`` may not follow ``existing`` (oldest
    first) under ``strategy``."""
    if not existing or strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError(
            "the schema compatibility strategy is ALWAYS_INCOMPATIBLE: no new schema accepted"
        )
    against = list(existing) if strategy.transitive else [existing[-1]]
    for old in reversed(against):
        if old.type is not new.type:
            raise IncompatibleSchemaError(
                f"incompatible schema: existing schema type {old.type}, new schema type {new.type}"
            )
        if new.type.avro_based:
            _check_avro(new, old, strategy)


def _check_avro(new: SchemaInfo, old: SchemaInfo, strategy: CompatibilityStrategy) -> None:
    try:
        new_schema = parse_schema(new.data)
        old_schema = parse_schema(old.data)
    except InvalidAvroSchemaError as exc:
        if new.type is SchemaType.AVRO:
            raise InvalidSchemaError(f"invalid AVRO schema definition: {exc}") from None
        return  # JSON schemas that are not Avro definitions: not compared (as Pulsar)
    reasons: list[str] = []
    if strategy.backward:
        reasons += incompatibilities(new_schema, old_schema)
    if strategy.forward:
        reasons += incompatibilities(old_schema, new_schema)
    if reasons:
        raise IncompatibleSchemaError(
            f"incompatible schema under {strategy.value}: {'; '.join(reasons)}"
        )
