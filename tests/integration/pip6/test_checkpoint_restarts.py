"""Producers that restart from a checkpoint with batching on, and key-based batching, with
the official Python, Java and Go clients: every send is answered, each message stored
once, on one broker, across its kill -9, and across a failover in a cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from harness.pulsar_go import ensure_go_client, go_produce
from harness.pulsar_java import Batching, ensure_java_client, java_payload, java_produce
from tests.integration.cluster.conftest import owner_of
from tests.integration.conftest import serve
from tests.optional_pieces import require

CLIENTS = ["python", "java", "go"]
SEND_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def drivers() -> None:
    """Both drivers built once, before any test times anything."""
    ensure_java_client()
    require("go")
    ensure_go_client()


@pytest.fixture
def dedup_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, broker_deduplication_enabled=True)


def python_produce(
    url: str, topic: str, ids: range, batching: Batching, keys: int
) -> list[pulsar.Result]:
    """Sends ``java_payload(i)`` with sequence id ``i`` for each id, asynchronously then
    flushed (so that ids share batches); the result of every send."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic,
            producer_name="p",
            batching_enabled=batching != "none",
            batching_type=pulsar.BatchingType.KeyBased
            if batching == "key"
            else pulsar.BatchingType.Default,
            batching_max_publish_delay_ms=50,
            send_timeout_millis=SEND_TIMEOUT_MS,
        )
        results: dict[int, pulsar.Result] = {}
        done = threading.Event()

        def callback(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def record(result: pulsar.Result, _: pulsar.MessageId) -> None:
                results[i] = result
                if len(results) == len(ids):
                    done.set()

            return record

        for i in ids:
            key = f"k{i % keys}" if keys else None
            producer.send_async(java_payload(i), callback(i), partition_key=key, sequence_id=i)
        producer.flush()
        assert done.wait(SEND_TIMEOUT_MS / 1000 + 10), f"unanswered: {set(ids) - set(results)}"
        producer.close()
        return [results[i] for i in ids]
    finally:
        client.close()


def produce(kind: str, url: str, topic: str, ids: range, batching: Batching, keys: int = 0) -> None:
    """One producer named ``p`` of the given client sends ``ids``; every send must be
    acknowledged (stored or a duplicate)."""
    if kind == "python":
        results = python_produce(url, topic, ids, batching, keys)
        assert results == [pulsar.Result.Ok] * len(ids)
        return
    run = java_produce if kind == "java" else go_produce
    produced = run(url, topic, len(ids), name="p", batching=batching, keys=keys, first=ids.start)
    assert [m.sequence_id for m in produced.sent] == list(ids)


def stored(url: str, topic: str) -> list[bytes]:
    """Every message of the topic, in order, as the Python client's reader sees it."""
    client = pulsar.Client(url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_batching_producer_restarting_from_a_checkpoint_stores_the_rest_once(
    drivers: None, dedup_broker: BrokerProcess, topic: str, kind: str
) -> None:
    url = dedup_broker.service_url
    produce(kind, url, topic, range(0, 10), "default")
    produce(kind, url, topic, range(5, 15), "default")  # from checkpoint 5: one batch, 5..14
    produce(kind, url, topic, range(12, 20), "default")
    assert stored(url, topic) == [java_payload(i) for i in range(20)]


@pytest.mark.parametrize("kind", CLIENTS)
def test_key_based_batches_are_stored_once_and_their_replay_adds_nothing(
    drivers: None, dedup_broker: BrokerProcess, topic: str, kind: str
) -> None:
    url = dedup_broker.service_url
    produce(kind, url, topic, range(1, 61), "key", keys=3)
    produce(kind, url, topic, range(31, 91), "key", keys=3)  # restarted from checkpoint 31
    messages = stored(url, topic)
    assert sorted(messages) == sorted(java_payload(i) for i in range(1, 91))
    for key in range(3):  # order holds per key
        ids = [int(m.decode().removeprefix("m-")) for m in messages]
        assert [i for i in ids if i % 3 == key] == [i for i in range(1, 91) if i % 3 == key]


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_restart_from_a_checkpoint_across_a_kill_of_the_broker(
    drivers: None, dedup_broker: BrokerProcess, topic: str, kind: str
) -> None:
    """The broker is killed while the restarted producer sends (before, during or after
    its batch reached the broker): its client resends to the restarted broker."""
    url = dedup_broker.service_url
    produce(kind, url, topic, range(0, 10), "default")
    errors: list[BaseException] = []

    def restart_from_checkpoint() -> None:
        try:
            produce(kind, url, topic, range(5, 15), "default")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    sender = threading.Thread(target=restart_from_checkpoint)
    sender.start()
    time.sleep(0.5 if kind == "python" else 1.5)  # the JVM and Go drivers start slower
    dedup_broker.restart(kill=True)
    sender.join(SEND_TIMEOUT_MS / 1000 + 60)
    assert not sender.is_alive() and not errors, errors
    assert stored(url, topic) == [java_payload(i) for i in range(15)]


@pytest.fixture
def dedup_cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ClusterProcesses]:
    cluster = ClusterProcesses(
        kafka_bootstrap, tmp_path, size=2, settings={"broker_deduplication_enabled": True}
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_a_restart_from_a_checkpoint_after_a_failover(
    drivers: None, dedup_cluster: ClusterProcesses, topic: str
) -> None:
    """The owner dies (kill -9) after the first run; the restarted producers of each client
    find the topic on the other broker, which recovered what was stored."""
    url = dedup_cluster.service_url
    produce("python", url, topic, range(0, 10), "default")
    owner_of(dedup_cluster, topic).kill()
    produce("python", url, topic, range(5, 15), "default")
    produce("java", url, topic, range(10, 20), "default")
    produce("go", url, topic, range(15, 25), "key", keys=3)
    assert sorted(stored(url, topic)) == sorted(java_payload(i) for i in range(25))
    assert len(stored(url, topic)) == 25
