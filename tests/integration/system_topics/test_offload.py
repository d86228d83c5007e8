"""Tiered storage: offloaded ledgers stay readable (reader and subscription, same message
ids) after their Kafka copy is gone, and their copies go through OFFLOAD_LEDGER intents
when trimmed or when the topic is deleted. Forged intents delete nothing; the doctor
finds a planted orphan copy."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Producer

from dedup_broker.storage.offload.filesystem import FilesystemOffloader
from dedup_broker.storage.values import LedgerType
from system_topics.intents import DeletionIntent, encode_intent
from system_topics.mark_phase import intent_key
from tests.integration.system_topics.deletion_helpers import Cluster, metric, wait_until

P = "dedup_broker_ledger_deletion_"
SENT = P + "intents_sent_total"


@pytest.fixture
def cluster(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(
        kafka_bootstrap,
        tmp_path,
        managed_ledger_offload_driver="filesystem",
        file_system_uri=str(tmp_path / "tiered"),
        managed_ledger_offload_deletion_lag_ms=0,
    )
    c.broker.start()
    try:
        yield c
    finally:
        c.stop()


def _offloader(cluster: Cluster) -> FilesystemOffloader:
    return FilesystemOffloader(cluster.tmp_path / "tiered", cluster.name)


def _path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def _publish(cluster: Cluster, topic: str, count: int) -> None:
    """``count`` messages, kept by a durable subscription ``sub`` that acknowledges none."""
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(b"m-%d" % i)
    finally:
        client.close()


def _read_all(cluster: Cluster, topic: str) -> list[tuple[bytes, int, int]]:
    """Every message with its (ledger id, entry id), through a reader."""
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            msg = reader.read_next(10_000)
            out.append((msg.data(), msg.message_id().ledger_id(), msg.message_id().entry_id()))
        return out
    finally:
        client.close()


def _seek_by_time(cluster: Cluster, topic: str, count: int, index: int) -> tuple[bytes, bytes]:
    """(expected, found): the first message published at or after message ``index``'s
    publish time, and what a consumer seeking to that time receives."""
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic, "seeker", initial_position=pulsar.InitialPosition.Earliest
        )
        messages = [consumer.receive(10_000) for _ in range(count)]
        stamp = messages[index].publish_timestamp()
        expected = next(m for m in messages if m.publish_timestamp() >= stamp).data()
        consumer.seek(stamp)
        found = consumer.receive(10_000).data()
        consumer.unsubscribe()  # a subscription of its own would hold the ledgers
        return bytes(expected), bytes(found)
    finally:
        client.close()


def _offloaded(cluster: Cluster, topic: str) -> list[int]:
    stats = cluster.admin_json("GET", _path(topic) + "/internalStats")
    return [ledger["ledgerId"] for ledger in stats["ledgers"] if ledger["offloaded"]]


def _offload(cluster: Cluster, topic: str, before_ledger: int) -> None:
    body = json.dumps({"ledgerId": before_ledger, "entryId": 0}).encode()
    cluster.admin_json("PUT", _path(topic) + "/offload", body)
    wait_until(
        lambda: cluster.admin_json("GET", _path(topic) + "/offload")["status"] == "SUCCESS",
        60,
        "offload done",
    )


def test_offloaded_ledgers_are_read_without_kafka_and_deleted_when_trimmed(
    cluster: Cluster,
) -> None:
    worker = cluster.add_worker()
    topic = f"persistent://public/default/off-{uuid.uuid4().hex[:8]}"
    _publish(cluster, topic, 30)
    ledgers = cluster.ledgers_of(topic)
    before = _read_all(cluster, topic)
    assert [m[0] for m in before] == [b"m-%d" % i for i in range(30)]

    _offload(cluster, topic, ledgers[4])
    offloaded = ledgers[:4]
    assert _offloaded(cluster, topic) == offloaded
    status = cluster.admin_json("GET", _path(topic) + "/offload")
    assert status["firstUnoffloadedMessage"]["ledgerId"] == ledgers[4]
    # The deletion lag is 0: the Kafka copies go through LEDGER intents, the ledgers stay.
    wait_until(lambda: not (cluster.ledger_topics() & set(offloaded)), 60, "Kafka copies gone")
    assert sorted(c.ledger_id for c in _offloader(cluster).copies()) == offloaded
    assert cluster.ledgers_of(topic) == ledgers

    # Readers, and after a restart too, get the same messages at the same positions.
    assert _read_all(cluster, topic) == before
    cluster.broker.restart()
    assert _read_all(cluster, topic) == before
    expected, found = _seek_by_time(cluster, topic, 30, 7)  # in an offloaded ledger
    assert found == expected

    # The subscription reads through them, then acknowledges everything: trimmed.
    client = pulsar.Client(cluster.broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        for i in range(30):
            msg = consumer.receive(10_000)
            assert msg.data() == b"m-%d" % i
            consumer.acknowledge(msg)
        consumer.close()
    finally:
        client.close()
    cluster.trim(topic)
    wait_until(lambda: _offloader(cluster).copies() == [], 60, "offloaded copies deleted")
    wait_until(lambda: cluster.in_flight() == 0, 60, "nothing in flight")
    closed = ledgers[:-1]
    assert not (cluster.ledger_topics() & set(closed))
    url = cluster.broker.http_url
    assert metric(worker.http_url, P + "ledgers_deleted_total", 'type="offload"') == 4
    # Counted since the restart: the trim's four OFFLOAD_LEDGER intents.
    assert metric(url, SENT, 'type="offload"') == 4
    report = cluster.doctor()
    assert report["ok"], report


def test_threshold_policy_offloads_and_topic_delete_removes_the_copies(cluster: Cluster) -> None:
    cluster.add_worker()
    namespace = "/admin/v2/namespaces/public/default/offloadThreshold"
    assert cluster.admin_json("GET", namespace) == -1
    cluster.admin_json("PUT", namespace, b"0")
    assert cluster.admin_json("GET", namespace) == 0
    # The namespace's offloadDeletionLagMs keeps the Kafka copies (-1: forever) over the
    # broker's managedLedgerOffloadDeletionLagMs (0) until it is removed.
    lag = "/admin/v2/namespaces/public/default/offloadDeletionLagMs"
    cluster.admin_json("PUT", lag, b"-1")
    topic = f"persistent://public/default/thr-{uuid.uuid4().hex[:8]}"
    _publish(cluster, topic, 22)
    ledgers = cluster.ledgers_of(topic)
    closed = ledgers[:4]  # 5 entries per ledger; the current one holds the last 2
    wait_until(lambda: _offloaded(cluster, topic) == closed, 60, "threshold offload")
    time.sleep(2)
    assert set(closed) <= cluster.ledger_topics()
    cluster.admin_json("DELETE", lag)
    cluster.admin_json("PUT", namespace, b"0")  # the namespace's topics look again
    wait_until(lambda: not (cluster.ledger_topics() & set(closed)), 60, "Kafka copies gone")
    assert [m[0] for m in _read_all(cluster, topic)] == [b"m-%d" % i for i in range(22)]

    cluster.admin_json("DELETE", _path(topic) + "?force=true")
    wait_until(lambda: _offloader(cluster).copies() == [], 60, "offloaded copies deleted")
    wait_until(lambda: not (cluster.ledger_topics() & set(ledgers)), 60, "ledger topics gone")
    wait_until(lambda: cluster.in_flight() == 0, 60, "nothing in flight")
    assert metric(cluster.broker.http_url, SENT, 'type="offload"') == len(closed)
    cluster.admin_json("DELETE", namespace)
    assert cluster.doctor()["ok"]


def test_forged_offload_intents_delete_nothing_and_doctor_finds_orphans(
    cluster: Cluster,
) -> None:
    worker = cluster.add_worker()
    topic = f"persistent://public/default/forge-{uuid.uuid4().hex[:8]}"
    name = "public/default/persistent/" + topic.rsplit("/", 1)[1]
    _publish(cluster, topic, 15)
    ledgers = cluster.ledgers_of(topic)
    _offload(cluster, topic, ledgers[2])
    offloader = _offloader(cluster)
    wait_until(lambda: not (cluster.ledger_topics() & set(ledgers[:2])), 60, "Kafka copies gone")
    copies = {c.ledger_id: c for c in offloader.copies()}
    assert sorted(copies) == ledgers[:2]
    real_uid = copies[ledgers[0]].uid
    # A file named like a copy of ledger 1 whose header says it is ledger 0's.
    planted = offloader.path(ledgers[1], real_uid)
    shutil.copyfile(copies[ledgers[0]].path, planted)

    def offload_intent(topic_name: str, ledger_id: int, uid: str) -> bytes:
        return encode_intent(
            DeletionIntent(
                topic_name,
                ledger_id,
                ledger_type=LedgerType.OFFLOAD_LEDGER,
                offload={"driver": "filesystem", "uid": uid},
            )
        )

    forged = [
        offload_intent(name, ledgers[0], str(uuid.uuid4())),  # wrong uid: no such copy
        offload_intent("public/default/persistent/other", ledgers[0], real_uid),  # mismatch
        offload_intent(name, ledgers[2], str(uuid.uuid4())),  # not offloaded: no such copy
        offload_intent(name, ledgers[0], real_uid),  # still listed: in use
        offload_intent(name, ledgers[1], real_uid),  # the planted file names ledger 0
        encode_intent(DeletionIntent(name, ledgers[2], ledger_type=LedgerType.LEDGER)),  # in use
        encode_intent(
            DeletionIntent(name, ledgers[0], ledger_type=LedgerType.OFFLOAD_LEDGER)
        ),  # no uid
    ]
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for value in forged:
        producer.produce(cluster.config().two_phase_deletion_topic, value, intent_key(1))
    producer.flush(10)
    wait_until(
        lambda: metric(worker.http_url, P + "intents_acknowledged_total") == 2 + len(forged), 60
    )
    rejected = {
        reason: metric(worker.http_url, P + "intents_rejected_total", f'reason="{reason}"')
        for reason in ("not-ours", "in-use", "mismatch")
    }
    assert rejected == {"not-ours": 1, "in-use": 2, "mismatch": 2}
    # Nothing was deleted: both copies, the planted file, every Kafka copy still listed.
    assert {(c.ledger_id, c.uid) for c in offloader.copies()} == {
        (ledgers[0], real_uid),
        (ledgers[1], copies[ledgers[1]].uid),
        (ledgers[1], real_uid),
    }
    assert set(ledgers[2:]) <= cluster.ledger_topics()
    assert [m[0] for m in _read_all(cluster, topic)] == [b"m-%d" % i for i in range(15)]

    report = cluster.doctor()
    assert report["offloadOrphans"] == [
        {"ledgerId": ledgers[1], "uid": real_uid, "path": str(planted)}
    ]
    assert report["orphans"] == [] and report["missing"] == [] and not report["ok"]
    # A listed copy that disappears is reported as missing.
    copies[ledgers[1]].path.unlink()
    assert cluster.doctor()["offloadMissing"] == [
        {"ledgerId": ledgers[1], "uid": copies[ledgers[1]].uid, "managedLedger": name}
    ]
