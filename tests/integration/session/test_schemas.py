"""Schemas with the official Python client: versions in PRODUCER_SUCCESS and in messages,
evolution under Pulsar's compatibility rules, refusals, the admin routes, and a restart."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import Integer, JsonSchema, Record, Schema, String, StringSchema

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess
from tests.integration.conftest import make_broker

RECEIVE_MS = 10_000


def user_v1() -> type[Record]:
    return type("User", (Record,), {"name": String(), "age": Integer(required=True)})


def user_v2() -> type[Record]:
    """v1 with a new field that has a default: compatible under FULL."""
    return type(
        "User",
        (Record,),
        {
            "name": String(),
            "age": Integer(required=True),
            "email": String(required_default=True),
        },
    )


def user_without_age() -> type[Record]:
    """v1 without its required field ``age`` (no default): refused under FULL."""
    return type("User", (Record,), {"name": String()})


def admin(broker: BrokerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = json.dumps(body).encode() if body is not None else None
    status, answer = http_request(method, broker.http_url + path, raw)
    return status, json.loads(answer) if answer else None


def version_of(message: pulsar.Message) -> bytes:
    """The message's ``schema_version`` (the client hands it out as text)."""
    raw: str | bytes = message.schema_version()
    return raw.encode("latin-1") if isinstance(raw, str) else raw


def schema_path(topic: str) -> str:
    return "/admin/v2/schemas/" + topic.removeprefix("persistent://")


def round_trip(client: pulsar.Client, topic: str, schema: Schema, values: list[Any]) -> list[Any]:
    consumer = client.subscribe(
        topic,
        f"s-{uuid.uuid4().hex[:6]}",
        schema=schema,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(topic, schema=schema)
    for value in values:
        producer.send(value)
    received = []
    for _ in values:
        message = consumer.receive(RECEIVE_MS)
        received.append(message.value())
        consumer.acknowledge(message)
    producer.close()
    consumer.close()
    return received


def test_json_records_evolve_and_incompatible_ones_are_refused(
    client: pulsar.Client, broker: BrokerProcess, topic: str
) -> None:
    v1, v2 = user_v1(), user_v2()
    first = [v1(name=f"n{i}", age=i) for i in range(5)]
    got = round_trip(client, topic, JsonSchema(v1), first)
    assert [(u.name, u.age) for u in got] == [(u.name, u.age) for u in first]

    producer = client.create_producer(topic, schema=JsonSchema(v2))
    producer.send(v2(name="evolved", age=42, email="e@x"))
    reader = client.subscribe(
        topic, "all", schema=JsonSchema(v2), initial_position=pulsar.InitialPosition.Earliest
    )
    messages = [reader.receive(RECEIVE_MS) for _ in range(6)]
    assert [version_of(m) for m in messages] == [b"\0" * 7 + b"\0"] * 5 + [b"\0" * 7 + b"\1"]
    last = messages[-1].value()
    assert (last.name, last.age, last.email) == ("evolved", 42, "e@x")
    assert messages[0].value().email is None  # written with v1: read with v2's default

    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(user_without_age()))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())

    status, everything = admin(broker, "GET", schema_path(topic) + "/schemas")
    assert status == 200
    versions = everything["getSchemaResponses"]
    assert [(s["version"], s["type"]) for s in versions] == [(0, "JSON"), (1, "JSON")]
    assert json.loads(versions[1]["data"])["fields"][2]["name"] == "email"
    status, latest = admin(broker, "GET", schema_path(topic) + "/schema")
    assert status == 200 and set(latest) == {"version", "type", "timestamp", "data", "properties"}
    assert latest["version"] == 1
    assert admin(broker, "GET", schema_path(topic) + "/schema/0")[1]["version"] == 0


def test_string_schema_and_a_producer_without_schema(
    client: pulsar.Client, broker: BrokerProcess, topic: str
) -> None:
    assert round_trip(client, topic, StringSchema(), ["a", "b", "ü"]) == ["a", "b", "ü"]
    assert admin(broker, "GET", schema_path(topic) + "/schema")[1]["type"] == "STRING"
    bytes_producer = client.create_producer(topic)  # BYTES: allowed, no version
    bytes_producer.send(b"raw")
    bytes_producer.close()


def test_schema_of_a_topic_without_one_is_404(broker: BrokerProcess, topic: str) -> None:
    status, body = admin(broker, "GET", schema_path(topic) + "/schema")
    assert status == 404 and "reason" in body


def test_namespace_strategy_lets_a_field_go(client: pulsar.Client, broker: BrokerProcess) -> None:
    namespace = "public/default"
    topic = f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"
    client.create_producer(topic, schema=JsonSchema(user_v1())).close()
    status, _ = admin(
        broker, "POST", f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy", "BACKWARD"
    )
    assert status == 204
    try:
        producer = client.create_producer(topic, schema=JsonSchema(user_without_age()))
        producer.close()
    finally:
        admin(broker, "DELETE", f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy")
    assert len(admin(broker, "GET", schema_path(topic) + "/schemas")[1]["getSchemaResponses"]) == 2


def test_avro_records_round_trip(client: pulsar.Client, topic: str) -> None:
    from pulsar.schema import AvroSchema

    v1 = user_v1()
    sent = [v1(name=f"a{i}", age=i) for i in range(3)]
    got = round_trip(client, topic, AvroSchema(v1), sent)
    assert [(u.name, u.age) for u in got] == [(u.name, u.age) for u in sent]
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(user_without_age()))


def test_schemas_survive_a_restart(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"
    with make_broker(kafka_bootstrap, tmp_path) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            client.create_producer(topic, schema=JsonSchema(user_v1())).close()
            client.create_producer(topic, schema=JsonSchema(user_v2())).close()
        finally:
            client.close()
        before = admin(broker, "GET", schema_path(topic) + "/schemas")[1]
        broker.restart(kill=False)
        after = admin(broker, "GET", schema_path(topic) + "/schemas")[1]
        assert after == before and len(after["getSchemaResponses"]) == 2
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
        try:
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(topic, schema=JsonSchema(user_without_age()))
            v2 = user_v2()
            producer = client.create_producer(topic, schema=JsonSchema(v2))
            producer.send(v2(name="x", age=1))
            consumer = client.subscribe(
                topic,
                "s",
                schema=JsonSchema(v2),
                initial_position=pulsar.InitialPosition.Earliest,
            )
            message = consumer.receive(RECEIVE_MS)
            assert version_of(message) == b"\0" * 7 + b"\1"  # v2 kept its number
        finally:
            client.close()


def test_a_deleted_topic_takes_its_schema_with_it(
    client: pulsar.Client, broker: BrokerProcess, topic: str
) -> None:
    """As in Pulsar: deleting a topic (or a partitioned topic) deletes its schema, so a
    topic created again under the name takes a schema of another type."""
    v1 = user_v1()
    round_trip(client, topic, JsonSchema(v1), [v1(name="a", age=1)])
    topic_path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    assert admin(broker, "DELETE", topic_path)[0] == 204
    assert admin(broker, "GET", schema_path(topic) + "/schema")[0] == 404
    assert round_trip(client, topic, StringSchema(), ["again"]) == ["again"]

    partitioned = topic + "-p"
    partitioned_path = topic_path + "-p/partitions"
    assert admin(broker, "PUT", partitioned_path, 2)[0] == 204
    round_trip(client, partitioned, JsonSchema(v1), [v1(name="b", age=2)])
    assert admin(broker, "DELETE", partitioned_path)[0] == 204
    assert admin(broker, "GET", schema_path(partitioned) + "/schema")[0] == 404
    assert admin(broker, "PUT", partitioned_path, 2)[0] == 204
    assert round_trip(client, partitioned, StringSchema(), ["again"]) == ["again"]
