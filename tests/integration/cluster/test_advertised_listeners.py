"""advertisedListeners: a lookup naming a listener is answered with that listener's URLs,
by the owner itself or by another broker of the cluster; the official client with a
``listener_name`` produces and consumes through it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar

from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from harness.raw_client import RawConnection
from tests.integration.cluster.conftest import get_json, owner_of


def lookup(broker: BrokerProcess, topic: str, listener: str) -> pb.CommandLookupTopicResponse:
    connection = RawConnection("127.0.0.1", broker.port)
    try:
        connection.connect()
        command = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
        command.lookupTopic.topic = topic
        command.lookupTopic.request_id = 1
        command.lookupTopic.advertised_listener_name = listener
        connection.send(command)
        return connection.expect(pb.BaseCommand.LOOKUP_RESPONSE).command.lookupTopicResponse
    finally:
        connection.close()


def test_lookups_answer_the_named_listener(kafka_bootstrap: str, tmp_path: Path) -> None:
    cluster = ClusterProcesses(kafka_bootstrap, tmp_path, size=0)
    brokers = [cluster.add() for _ in range(2)]
    for index, broker in enumerate(brokers):
        broker.settings["advertised_listeners"] = (
            f"internal:pulsar://127.0.0.1:{broker.port},"
            f"external:pulsar://broker-{index}.example.com:{6650 + index}"
        )
    try:
        cluster.start()
        topics = [f"persistent://public/default/l-{uuid.uuid4().hex[:8]}" for _ in range(12)]
        owners = {t: owner_of(cluster, t) for t in topics}
        for topic in topics:
            owner = brokers.index(owners[topic])
            external = f"pulsar://broker-{owner}.example.com:{6650 + owner}"
            for asked in brokers:
                assert lookup(asked, topic, "external").brokerServiceUrl == external
                internal = lookup(asked, topic, "internal")
                assert internal.brokerServiceUrl == f"pulsar://127.0.0.1:{owners[topic].port}"
            local = topic.removeprefix("persistent://")
            for asked in brokers:
                data = get_json(
                    f"{asked.http_url}/lookup/v2/topic/persistent/{local}?listenerName=external"
                )
                assert isinstance(data, dict) and data["brokerUrl"] == external
            missing = lookup(brokers[0], topic, "nowhere")
            assert missing.response == pb.CommandLookupTopicResponse.Failed
            assert "no listener 'nowhere'" in missing.message
        # The official client with a listener name reaches every topic through it.
        client = pulsar.Client(cluster.service_url, listener_name="internal")
        try:
            for topic in topics[:4]:
                consumer = client.subscribe(topic, "s")
                client.create_producer(topic).send(topic.encode())
                assert consumer.receive(10_000).data() == topic.encode()
        finally:
            client.close()
    finally:
        cluster.stop()
