"""The schema registry over an in-memory policies table: versions, identity, strategies,
deletion, and what producers and consumers are told."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dedup_broker.config import BrokerConfig
from dedup_broker.domain_base.names import TopicName
from dedup_broker.domain_base.policies import Policies
from dedup_broker.errors import ConfigError
from dedup_broker.schema.compatibility import (
    CompatibilityStrategy,
    IncompatibleSchemaError,
    InvalidSchemaError,
    SchemaInfo,
    SchemaNotFoundError,
    SchemaType,
    check_compatible,
)
from dedup_broker.schema.registry import (
    SchemaRegistry,
    default_strategy,
    version_bytes,
    version_of,
)
from harness.memory_table import MemoryTable

TOPIC = TopicName.parse("persistent://public/default/orders")


def avro(*fields: dict[str, Any], kind: SchemaType = SchemaType.AVRO) -> SchemaInfo:
    definition = {"type": "record", "name": "Order", "fields": list(fields)}
    return SchemaInfo(kind, json.dumps(definition).encode(), {"origin": "test"})


ID = {"name": "id", "type": "long"}
NOTE = {"name": "note", "type": ["null", "string"], "default": None}
AMOUNT = {"name": "amount", "type": "int"}
V1 = avro(ID, AMOUNT)
V2 = avro(ID, AMOUNT, NOTE)  # a new field with a default
WITHOUT_AMOUNT = avro(ID)  # removed a field without a default
STRING = SchemaInfo(SchemaType.STRING, b"")


def registry(table: MemoryTable | None = None, **settings: Any) -> SchemaRegistry:
    table = table if table is not None else MemoryTable()
    config = BrokerConfig().with_overrides(**settings)
    return SchemaRegistry(config, Policies(table.as_metadata_table()), clock=lambda: 1700000000.5)


def test_version_encoding() -> None:
    assert version_bytes(0) == b"\0" * 8
    assert version_bytes(258) == b"\0\0\0\0\0\0\x01\x02"
    assert version_of(version_bytes(7)) == 7
    assert version_of(b"") is None and version_of(b"\1") is None


async def test_first_schema_is_version_0_and_identical_ones_reuse_it() -> None:
    r = registry()
    first = await r.register(TOPIC, V1)
    assert first.version == 0 and first.timestamp == 1700000000500
    again = await r.register(TOPIC, SchemaInfo(V1.type, V1.data, {"other": "props"}))
    assert again.version == 0
    assert [s.version for s in r.versions(TOPIC)] == [0]


async def test_compatible_evolution_gets_the_next_version() -> None:
    r = registry()
    await r.register(TOPIC, V1)
    assert (await r.register(TOPIC, V2)).version == 1
    assert (await r.register(TOPIC, V1)).version == 0  # an older version is found again
    assert r.get(TOPIC).info == V2
    assert r.get(TOPIC, 0).info == V1
    with pytest.raises(SchemaNotFoundError):
        r.get(TOPIC, 5)


async def test_incompatible_schemas_are_refused_under_full() -> None:
    r = registry()
    await r.register(TOPIC, V1)
    with pytest.raises(IncompatibleSchemaError, match="amount"):
        await r.register(TOPIC, WITHOUT_AMOUNT)
    with pytest.raises(IncompatibleSchemaError, match="type"):
        await r.register(TOPIC, STRING)
    assert not r.is_compatible(TOPIC, WITHOUT_AMOUNT)
    assert r.is_compatible(TOPIC, V2)
    assert len(r.versions(TOPIC)) == 1


async def test_namespace_strategy_overrides_the_broker_setting() -> None:
    r = registry()
    await r.register(TOPIC, V1)
    assert r.strategy_of(TOPIC) is CompatibilityStrategy.FULL
    await r.set_namespace_strategy("public/default", CompatibilityStrategy.BACKWARD)
    assert r.namespace_strategy("public/default") is CompatibilityStrategy.BACKWARD
    assert (await r.register(TOPIC, WITHOUT_AMOUNT)).version == 1  # BACKWARD allows it
    await r.set_namespace_strategy("public/default", CompatibilityStrategy.ALWAYS_COMPATIBLE)
    assert (await r.register(TOPIC, STRING)).version == 2
    await r.set_namespace_strategy("public/default", None)
    assert r.strategy_of(TOPIC) is CompatibilityStrategy.FULL


def test_strategies() -> None:
    old = [V1]
    check_compatible(WITHOUT_AMOUNT, old, CompatibilityStrategy.BACKWARD)
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(WITHOUT_AMOUNT, old, CompatibilityStrategy.FORWARD)
    adds_required = avro(ID, AMOUNT, {"name": "x", "type": "int"})
    check_compatible(adds_required, old, CompatibilityStrategy.FORWARD)
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(adds_required, old, CompatibilityStrategy.BACKWARD)
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(V2, old, CompatibilityStrategy.ALWAYS_INCOMPATIBLE)
    check_compatible(STRING, old, CompatibilityStrategy.ALWAYS_COMPATIBLE)
    check_compatible(STRING, [], CompatibilityStrategy.ALWAYS_INCOMPATIBLE)  # the first one


def test_transitive_strategies_check_every_version() -> None:
    # v0 has amount (no default); v1 dropped it (BACKWARD ok); v2 reads v1 but not v0
    v0 = avro(ID, AMOUNT)
    v1 = avro(ID)
    v2 = avro(ID, {"name": "amount", "type": "string", "default": ""})
    check_compatible(v2, [v0, v1], CompatibilityStrategy.BACKWARD)
    with pytest.raises(IncompatibleSchemaError):
        check_compatible(v2, [v0, v1], CompatibilityStrategy.BACKWARD_TRANSITIVE)


def test_strategy_names() -> None:
    assert CompatibilityStrategy.parse('"full_transitive"') is CompatibilityStrategy.FULL_TRANSITIVE
    with pytest.raises(ConfigError):
        default_strategy(BrokerConfig().with_overrides(schema_compatibility_strategy="SOMETIMES"))


async def test_invalid_avro_definitions_are_refused() -> None:
    r = registry()
    with pytest.raises(InvalidSchemaError):
        await r.register(TOPIC, SchemaInfo(SchemaType.AVRO, b"{not avro"))
    # a JSON schema that is no Avro definition is taken as it is
    assert (await r.register(TOPIC, SchemaInfo(SchemaType.JSON, b'{"$schema": "x"}'))).version == 0


async def test_json_schemas_follow_avro_rules() -> None:
    r = registry()
    await r.register(TOPIC, avro(ID, AMOUNT, kind=SchemaType.JSON))
    assert (await r.register(TOPIC, avro(ID, AMOUNT, NOTE, kind=SchemaType.JSON))).version == 1
    with pytest.raises(IncompatibleSchemaError):
        await r.register(TOPIC, avro(ID, kind=SchemaType.JSON))
    with pytest.raises(IncompatibleSchemaError):  # same definition, another type
        await r.register(TOPIC, avro(ID, AMOUNT, NOTE))


async def test_partitions_share_their_topics_schemas() -> None:
    r = registry()
    await r.register(TOPIC.partition(0), V1)
    assert r.get(TOPIC.partition(3)).version == 0
    assert r.get(TOPIC).info == V1


async def test_schemas_persist_in_the_table() -> None:
    table = MemoryTable()
    await registry(table).register(TOPIC, V1)
    assert [k for k, _ in table.items("schemas/")] == ["schemas/public/default/orders/0"]
    stored = json.loads(table.get("schemas/public/default/orders/0") or b"")
    assert stored["type"] == "AVRO" and stored["properties"] == {"origin": "test"}
    reread = registry(table).get(TOPIC, 0)  # another registry on the same table
    assert reread.info == V1 and reread.timestamp == 1700000000500


async def test_delete_removes_versions_but_never_reuses_numbers() -> None:
    r = registry()
    await r.register(TOPIC, V1)
    await r.register(TOPIC, V2)
    assert await r.delete(TOPIC) == 1
    assert r.versions(TOPIC) == []
    assert await r.delete(TOPIC) is None
    assert (await r.register(TOPIC, STRING)).version == 2  # any schema: the topic has none


async def test_producers() -> None:
    r = registry()
    assert await r.for_producer(TOPIC, None) == b""
    assert await r.for_producer(TOPIC, V1) == version_bytes(0)
    assert await r.for_producer(TOPIC, V2) == version_bytes(1)
    with pytest.raises(IncompatibleSchemaError):
        await r.for_producer(TOPIC, STRING)
    with pytest.raises(IncompatibleSchemaError):  # NONE named by a producer is a schema
        await r.for_producer(TOPIC, SchemaInfo(SchemaType.NONE, b""))


async def test_a_producer_naming_none_registers_it_as_pulsar_does() -> None:
    """The Go client's ``BytesSchema`` names type ``NONE``: a version, which its messages
    carry and its consumers ask for; a producer without a schema still gets none."""
    r = registry()
    raw = SchemaInfo(SchemaType.NONE, b"", {"pulsar": "hello"})
    assert await r.for_producer(TOPIC, raw) == version_bytes(0)
    assert await r.for_producer(TOPIC, SchemaInfo(SchemaType.NONE, b"")) == version_bytes(0)
    assert r.get(TOPIC, 0).info == raw
    assert await r.for_producer(TOPIC, None) == b""
    with pytest.raises(IncompatibleSchemaError):
        await r.for_producer(TOPIC, STRING)


async def test_producers_without_auto_update_or_without_schema_when_enforced() -> None:
    r = registry(is_allow_auto_update_schema_enabled=False, is_schema_validation_enforced=True)
    assert await r.for_producer(TOPIC, None) == b""  # no schema yet
    assert await r.for_producer(TOPIC, V1) == version_bytes(0)  # the first one
    assert await r.for_producer(TOPIC, V1) == version_bytes(0)
    with pytest.raises(IncompatibleSchemaError, match="auto updating"):
        await r.for_producer(TOPIC, V2)
    with pytest.raises(IncompatibleSchemaError, match="must use a schema"):
        await r.for_producer(TOPIC, None)


async def test_consumers() -> None:
    r = registry()
    await r.for_consumer(TOPIC, None)
    await r.for_consumer(TOPIC, V1)  # the topic had none: registered
    assert r.get(TOPIC).info == V1
    await r.for_consumer(TOPIC, V2)  # compatible: checked, not registered
    assert len(r.versions(TOPIC)) == 1
    await r.for_consumer(TOPIC, SchemaInfo(SchemaType.AUTO_CONSUME, b""))
    with pytest.raises(IncompatibleSchemaError):
        await r.for_consumer(TOPIC, STRING)


def test_wire_round_trip() -> None:
    wire = V1.to_wire("public/default/orders")
    assert wire.type == 4 and wire.name == "public/default/orders"
    assert SchemaInfo.of_wire(wire) == V1
    assert SchemaType.of_wire(0) is SchemaType.NONE and SchemaType.BYTES.wire == 0
    assert SchemaType.of_wire(21) is SchemaType.AUTO_CONSUME
    assert SchemaType.KEY_VALUE.wire == 15
