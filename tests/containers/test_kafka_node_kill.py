"""A Kafka node lost under load, in containers: a three-node KRaft cluster (replication 3,
min.insync.replicas 2), a broker container on it, the official client publishing; the
node leading the topic's ledger is killed (SIGKILL to its container). Publishing goes on
on the other two nodes, and every acknowledged message is stored once."""

from __future__ import annotations

import time

import pulsar

from dedup_broker.devservers.containers import BrokerInDocker, KafkaClusterInDocker
from tests.containers import traffic

TOTAL = 1500
PER_SECOND = 150.0


def test_publishing_rides_through_a_kafka_node_kill(docker_engine: None) -> None:
    kafka = KafkaClusterInDocker(3, heap="320m")
    kafka.start()
    cluster = traffic.unique("node-kill")
    settings = {"broker_deduplication_enabled": True, "kafka_replication_factor": 3}
    broker = BrokerInDocker(kafka.bootstrap_servers, cluster, settings)
    clients: list[pulsar.Client] = []
    try:
        broker.start()
        topic = f"persistent://public/default/{traffic.unique('replicated')}"
        clients.append(traffic.client(broker.service_url))
        publisher = traffic.SteadyPublisher(clients[0], topic, "node-kill", TOTAL, PER_SECOND)
        publisher.start().wait_for(TOTAL // 3, timeout=120)

        victim = traffic.ledger_leader(kafka.bootstrap_servers, cluster)
        kafka.kill(victim)
        killed_at = time.monotonic()

        publisher.wait_all(timeout=240)
        assert not publisher.errors, publisher.errors[:5]
        # The dead node leads nothing any more: its partitions moved to the other two.
        while traffic.partitions_with_leader(kafka.bootstrap_servers, victim):
            assert time.monotonic() - killed_at < 60, f"node {victim} still leads partitions"
            time.sleep(1)
        traffic.assert_exactly_once(traffic.read_all(clients[0], topic), TOTAL)
    finally:
        for client in clients:
            client.close()
        broker.stop()
        kafka.stop()
