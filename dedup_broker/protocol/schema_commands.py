"""Builders of the schema answers the broker sends (``commands.py`` re-exports them)."""

from __future__ import annotations

from dedup_broker.protocol import pulsar_api_pb2 as pb

_U64_MASK = 0xFFFF_FFFF_FFFF_FFFF

SchemaAnswer = pb.CommandGetSchemaResponse | pb.CommandGetOrCreateSchemaResponse


def _answer(
    out: SchemaAnswer,
    request_id: int,
    schema_version: bytes | None,
    error: pb.ServerError | None,
    message: str | None,
) -> None:
    out.request_id = request_id & _U64_MASK
    if error is not None:
        out.error_code = error
    if message is not None:
        out.error_message = message
    if schema_version is not None:
        out.schema_version = schema_version


def get_schema_response(
    request_id: int,
    schema: pb.Schema | None = None,
    schema_version: bytes | None = None,
    error: pb.ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    """GET_SCHEMA_RESPONSE; ``message`` goes to ``error_message``, like every error text."""
    cmd = pb.BaseCommand(type=pb.BaseCommand.Type.GET_SCHEMA_RESPONSE)
    _answer(cmd.getSchemaResponse, request_id, schema_version, error, message)
    if schema is not None:
        cmd.getSchemaResponse.schema.CopyFrom(schema)
    return cmd


def get_or_create_schema_response(
    request_id: int,
    schema_version: bytes | None = None,
    error: pb.ServerError | None = None,
    message: str | None = None,
) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=pb.BaseCommand.Type.GET_OR_CREATE_SCHEMA_RESPONSE)
    _answer(cmd.getOrCreateSchemaResponse, request_id, schema_version, error, message)
    return cmd
