"""The Spark batch reader in real Spark local mode against a real broker: a topic (batched
and partitioned) becomes exactly its messages as rows; a message-id range exactly its part."""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
import pytest

from connectors.positions import Position
from connectors.spark_reader import read_topic
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def spark_session(spark: Any) -> Any:
    """The run's shared local SparkSession, with timestamps shown in UTC."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark


def publish(
    client: pulsar.Client, topic: str, count: int, prefix: str, *, batching: bool
) -> list[pulsar.MessageId]:
    producer = client.create_producer(
        topic,
        producer_name=f"{prefix}-producer-{uuid.uuid4().hex[:6]}",
        batching_enabled=batching,
        batching_max_messages=4,
        batching_max_publish_delay_ms=20,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    ids: list[Any] = [None] * count

    def keep(index: int) -> Any:
        def callback(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            assert result == pulsar.Result.Ok
            ids[index] = message_id

        return callback

    for i in range(count):
        producer.send_async(
            f"{prefix}-{i}".encode(),
            keep(i),
            partition_key=f"k{i % 5}",
            properties={"n": str(i), "kind": prefix},
            event_timestamp=1_700_000_000_000 + i,
        )
    producer.flush()
    producer.close()
    return ids


def test_partitioned_batched_topic_becomes_exactly_its_messages(
    broker: BrokerProcess, client: pulsar.Client, spark_session: Any
) -> None:
    name = f"sr-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, b"3")[0] == 204
    ids = publish(client, topic, 30, "batched", batching=True)
    ids += publish(client, topic, 9, "single", batching=False)
    values = [f"batched-{i}" for i in range(30)] + [f"single-{i}" for i in range(9)]

    df = read_topic(spark_session, broker.service_url, topic)
    rows = df.collect()

    assert sorted(row.value.decode() for row in rows) == sorted(values)
    by_value = {row.value.decode(): row for row in rows}
    for index, value in enumerate(values):
        row = by_value[value]
        n = index if index < 30 else index - 30
        message_id = ids[index]
        assert (row.ledger_id, row.entry_id, row.batch_index) == (
            message_id.ledger_id(),
            message_id.entry_id(),
            message_id.batch_index(),
        )
        assert row.partition == message_id.partition()
        assert row.topic == f"{topic}-partition-{message_id.partition()}"
        assert row.key == f"k{n % 5}"
        assert row.properties == {"n": str(n), "kind": value.split("-")[0]}
        assert int(row.event_time.timestamp() * 1000) == 1_700_000_000_000 + n
        assert row.producer_name.startswith(value.split("-")[0] + "-producer-")
        assert Position.of(pulsar.MessageId.deserialize(row.message_id)) == Position.of(message_id)
    assert len({row.partition for row in rows}) >= 2
    assert df.rdd.getNumPartitions() == 3
    assert any(row.batch_index > 0 for row in rows)
    assert df.filter(df.batch_index < 0).count() == 9


def test_a_message_id_range_inside_batches(
    client: pulsar.Client, topic: str, broker: BrokerProcess, spark_session: Any
) -> None:
    ids = publish(client, topic, 20, "r", batching=True)
    start, end = ids[5], ids[14]
    assert start.batch_index() > 0 and end.batch_index() > 0, "bounds should sit inside batches"

    inclusive = read_topic(spark_session, broker.service_url, topic, start=start, end=end)
    assert [row.value.decode() for row in inclusive.collect()] == [f"r-{i}" for i in range(5, 15)]
    exclusive = read_topic(
        spark_session,
        broker.service_url,
        topic,
        start=Position.of(start),
        end=Position.of(end),
        start_inclusive=False,
        end_inclusive=False,
    )
    assert [row.value.decode() for row in exclusive.collect()] == [f"r-{i}" for i in range(6, 14)]
    tail = read_topic(spark_session, broker.service_url, topic, start={topic: ids[17]})
    assert [row.value.decode() for row in tail.collect()] == ["r-17", "r-18", "r-19"]
