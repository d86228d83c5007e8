"""A reader opened on one partition of a partitioned topic sees ids that carry the partition,
as GET_LAST_MESSAGE_ID's do, so ``has_message_available`` turns false after the last one."""

from __future__ import annotations

import uuid

import pulsar

from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

RECEIVE_MS = 10_000


def test_partition_reader_stops_at_the_last_message(
    broker: BrokerProcess, client: pulsar.Client
) -> None:
    name = f"pr-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/partitions"
    assert http_request("PUT", path, b"2")[0] == 204
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(6):
        producer.send(f"p-{i}".encode())
    producer.close()
    for index, partition in enumerate(client.get_topic_partitions(topic)):
        reader = client.create_reader(partition, pulsar.MessageId.earliest)
        read = []
        while reader.has_message_available() and len(read) < 10:
            message = reader.read_next(RECEIVE_MS)
            assert message.message_id().partition() == index
            read.append(message.data())
        assert len(read) == 3
        reader.close()
