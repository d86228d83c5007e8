"""Broker failover between containers: two broker containers on one Kafka, the official
client publishing through both; the container serving the topic is killed (SIGKILL) and
the client goes on through the other one. Every acknowledged message is stored once."""

from __future__ import annotations

import pulsar

from dedup_broker.devservers.containers import BrokerInDocker, KafkaClusterInDocker
from tests.containers import traffic

TOTAL = 1500
PER_SECOND = 150.0


def test_publishing_goes_on_when_the_owning_broker_container_dies(
    kafka_single: KafkaClusterInDocker,
) -> None:
    cluster = traffic.unique("failover")
    settings = {"broker_deduplication_enabled": True} | traffic.cluster_settings(cluster)
    brokers = [BrokerInDocker(kafka_single.bootstrap_servers, cluster, settings) for _ in "ab"]
    clients: list[pulsar.Client] = []
    try:
        for broker in brokers:
            broker.start()
        topic = f"persistent://public/default/{traffic.unique('failover')}"
        hosts = ",".join(f"127.0.0.1:{broker.port}" for broker in brokers)
        clients.append(traffic.client(f"pulsar://{hosts}"))
        publisher = traffic.SteadyPublisher(clients[0], topic, "failover", TOTAL, PER_SECOND)
        publisher.start().wait_for(TOTAL // 3, timeout=120)

        port = traffic.owner_port([broker.http_url for broker in brokers], topic)
        owner = next(broker for broker in brokers if broker.port == port)
        survivor = next(broker for broker in brokers if broker is not owner)
        owner.kill()

        publisher.wait_all(timeout=240)
        assert not publisher.errors, publisher.errors[:5]
        assert traffic.owner_port([survivor.http_url], topic) == survivor.port
        clients.append(traffic.client(survivor.service_url))
        traffic.assert_exactly_once(traffic.read_all(clients[-1], topic), TOTAL)
    finally:
        for client in clients:
            client.close()
        for broker in brokers:
            broker.stop()
