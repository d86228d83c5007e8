"""What clients hear about schemas on the wire: PRODUCER_SUCCESS's schema_version,
IncompatibleSchema, GET_SCHEMA and GET_OR_CREATE_SCHEMA (in memory, byte for byte)."""

from __future__ import annotations

import json

from dedup_broker.protocol import commands
from dedup_broker.protocol import pulsar_api_pb2 as pb
from dedup_broker.schema.compatibility import SchemaInfo, SchemaType
from dedup_broker.schema.registry import version_bytes
from harness import client_commands as client
from harness.memory_broker import MemoryBroker

TOPIC = "persistent://public/default/orders"
BASE = pb.BaseCommand


def avro(*names: str) -> SchemaInfo:
    fields = [{"name": n, "type": "long"} for n in names]
    definition = {"type": "record", "name": "Order", "fields": fields}
    return SchemaInfo(SchemaType.AVRO, json.dumps(definition).encode())


def producer(producer_id: int, request_id: int, schema: SchemaInfo) -> pb.BaseCommand:
    command = client.producer(TOPIC, producer_id, request_id, f"p{producer_id}")
    command.producer.schema.CopyFrom(schema.to_wire(TOPIC))
    return command


def get_schema(request_id: int, version: int | None = None) -> pb.BaseCommand:
    command = BASE(type=BASE.GET_SCHEMA)
    command.getSchema.request_id, command.getSchema.topic = request_id, TOPIC
    if version is not None:
        command.getSchema.schema_version = version_bytes(version)
    return command


def get_or_create(request_id: int, schema: SchemaInfo) -> pb.BaseCommand:
    command = BASE(type=BASE.GET_OR_CREATE_SCHEMA)
    command.getOrCreateSchema.request_id, command.getOrCreateSchema.topic = request_id, TOPIC
    command.getOrCreateSchema.schema.CopyFrom(schema.to_wire(TOPIC))
    return command


async def test_schema_commands() -> None:
    connection = await MemoryBroker().client()
    [frame] = await connection.exchange(get_schema(1))
    assert frame.command.getSchemaResponse.error_code == pb.TopicNotFound

    [frame] = await connection.exchange(producer(1, 2, avro("id")))
    assert frame.command == commands.producer_success(2, "p1", schema_version=version_bytes(0))

    [frame] = await connection.exchange(producer(2, 3, avro("other")))
    assert frame.command.error.error == pb.IncompatibleSchema

    [frame] = await connection.exchange(get_or_create(4, avro("id")))
    assert frame.command.getOrCreateSchemaResponse.schema_version == version_bytes(0)
    [frame] = await connection.exchange(get_or_create(5, avro("other")))
    assert frame.command.getOrCreateSchemaResponse.error_code == pb.IncompatibleSchema

    [frame] = await connection.exchange(get_schema(6))
    response = frame.command.getSchemaResponse
    assert not response.HasField("error_code")
    assert response.schema_version == version_bytes(0)
    assert SchemaInfo.of_wire(response.schema) == avro("id")
    [frame] = await connection.exchange(get_schema(7, version=3))
    assert frame.command.getSchemaResponse.error_code == pb.TopicNotFound
