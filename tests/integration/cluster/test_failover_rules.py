"""The rules that make a failover short for unmodified clients.

- A lookup (binary and HTTP) never names a broker that was killed or is frozen: it waits
  for the slot's new owner and names that one.
- A topic unloaded, or a slot handed over when its broker leaves, closes its producers and
  consumers with ``assignedBrokerServiceUrl`` (PIP-307): the broker the clients find the
  topic on, without looking it up again.
- A client reconnecting at once after an unload gets the topic again.
"""

from __future__ import annotations

import itertools
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from dedup_broker.protocol import pulsar_api_pb2 as pb
from harness import client_commands
from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from harness.raw_client import RawConnection
from tests.integration.cluster.conftest import get_json, owner_of

_requests = itertools.count(1)


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ClusterProcesses]:
    processes = ClusterProcesses(kafka_bootstrap, tmp_path, size=3)
    try:
        processes.start()
        yield processes
    finally:
        processes.stop()


def new_topic(cluster: ClusterProcesses) -> tuple[str, BrokerProcess, list[BrokerProcess]]:
    """A new topic, the broker that owns it and the others (a namespace has only four
    bundles: a given broker may own none of them)."""
    topic = f"persistent://public/default/rules-{uuid.uuid4().hex[:8]}"
    owner = owner_of(cluster, topic)
    return topic, owner, [b for b in cluster if b is not owner]


def topic_on(cluster: ClusterProcesses, broker: BrokerProcess) -> str:
    """Another topic whose bundle ``broker`` owns."""
    for _ in range(200):
        topic = f"persistent://public/default/rules-{uuid.uuid4().hex[:8]}"
        if owner_of(cluster, topic) is broker:
            return topic
    raise AssertionError(f"no topic found on {broker.service_url}")


def raw(broker: BrokerProcess) -> RawConnection:
    connection = RawConnection("127.0.0.1", broker.port)
    connection.connect()
    return connection


def binary_lookup(broker: BrokerProcess, topic: str) -> pb.CommandLookupTopicResponse:
    connection = raw(broker)
    try:
        request = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
        request.lookupTopic.topic = topic
        request.lookupTopic.request_id = next(_requests)
        connection.send(request)
        return connection.expect(
            pb.BaseCommand.LOOKUP_RESPONSE, timeout=40
        ).command.lookupTopicResponse
    finally:
        connection.close()


def http_lookup(broker: BrokerProcess, topic: str) -> str:
    local = topic.removeprefix("persistent://")
    data = get_json(f"{broker.http_url}/lookup/v2/topic/persistent/{local}")
    assert isinstance(data, dict)
    return str(data["brokerUrl"])


def attach_producer(broker: BrokerProcess, topic: str) -> RawConnection:
    connection = raw(broker)
    connection.send(client_commands.producer(topic, 1, next(_requests)))
    connection.expect(pb.BaseCommand.PRODUCER_SUCCESS, timeout=30)
    return connection


def test_lookups_never_name_a_killed_broker_and_wait_for_its_successor(
    cluster: ClusterProcesses,
) -> None:
    first, victim, (asked, other) = new_topic(cluster)
    topics = [first, topic_on(cluster, victim)]
    killed_at = time.monotonic()
    victim.kill()
    binary = binary_lookup(asked, topics[0])
    binary_took = time.monotonic() - killed_at
    http = http_lookup(other, topics[1])
    survivors = {asked.service_url, other.service_url}
    assert binary.brokerServiceUrl in survivors, binary
    # The broker asked may be the successor itself: then it says so (Connect).
    expected = (
        pb.CommandLookupTopicResponse.Connect
        if binary.brokerServiceUrl == asked.service_url
        else pb.CommandLookupTopicResponse.Redirect
    )
    assert binary.response == expected, binary
    assert http in survivors
    # Far below the Kafka session (30 s): the survivors removed the killed broker at once.
    assert binary_took < 15, f"the lookup took {binary_took:.1f}s"
    # And the broker named really serves the topic.
    named = next(b for b in cluster if b.service_url == binary.brokerServiceUrl)
    attach_producer(named, topics[0]).close()


def test_lookups_never_name_a_frozen_broker(cluster: ClusterProcesses) -> None:
    topic, victim, (asked, _) = new_topic(cluster)
    assert victim.process is not None
    victim.process.send_signal(signal.SIGSTOP)
    try:
        # Frozen longer than the peer timeout (3 s for test brokers): the others tell.
        time.sleep(4)
        answer = binary_lookup(asked, topic)
    finally:
        victim.process.send_signal(signal.SIGCONT)
    assert answer.brokerServiceUrl != victim.service_url
    assert answer.brokerServiceUrl in {b.service_url for b in cluster}


def test_an_unloaded_topics_clients_are_sent_back_to_it_and_find_it(
    cluster: ClusterProcesses,
) -> None:
    topic, owner, _ = new_topic(cluster)
    connection = attach_producer(owner, topic)
    local = topic.removeprefix("persistent://")
    request = urllib.request.Request(
        f"{owner.http_url}/admin/v2/persistent/{local}/unload", method="PUT"
    )
    urllib.request.urlopen(request, timeout=30).close()
    closed = connection.expect(pb.BaseCommand.CLOSE_PRODUCER).command.close_producer
    assert closed.assignedBrokerServiceUrl == owner.service_url
    # The client reconnects there at once: it gets the topic, never an error.
    connection.send(client_commands.producer(topic, 2, next(_requests)))
    connection.expect(pb.BaseCommand.PRODUCER_SUCCESS, timeout=30)
    connection.close()


def test_unloads_under_load_never_fail_the_official_client(cluster: ClusterProcesses) -> None:
    topic, owner, _ = new_topic(cluster)
    client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, send_timeout_millis=30_000)
        consumer = client.subscribe(topic, "unloads")
        local = topic.removeprefix("persistent://")
        for round_ in range(5):
            request = urllib.request.Request(
                f"{owner.http_url}/admin/v2/persistent/{local}/unload", method="PUT"
            )
            urllib.request.urlopen(request, timeout=30).close()
            producer.send(f"{round_}".encode())
        received = [consumer.receive(timeout_millis=30_000).data() for _ in range(5)]
        assert received == [f"{i}".encode() for i in range(5)]
    finally:
        client.close()


def test_a_leaving_broker_sends_its_clients_to_the_new_owner(cluster: ClusterProcesses) -> None:
    topic, leaving, _ = new_topic(cluster)
    connection = attach_producer(leaving, topic)
    assert leaving.process is not None
    leaving.process.send_signal(signal.SIGTERM)
    closed = connection.expect(pb.BaseCommand.CLOSE_PRODUCER, timeout=30).command.close_producer
    connection.close()
    successors = {b.service_url: b for b in cluster if b is not leaving}
    assert closed.assignedBrokerServiceUrl in successors, closed
    attach_producer(successors[closed.assignedBrokerServiceUrl], topic).close()
    leaving.stop()
