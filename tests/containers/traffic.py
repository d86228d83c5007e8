"""Publishing and reading back with the official client, for the container tier."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
import uuid
from collections import Counter

import pulsar
from confluent_kafka.admin import AdminClient


def quiet_logger() -> logging.Logger:
    """The client's own lines (reconnects while a container is down) stay out of the log."""
    logger = logging.getLogger("pulsar.containers")
    logger.setLevel(logging.CRITICAL)
    return logger


def client(service_url: str) -> pulsar.Client:
    return pulsar.Client(service_url, operation_timeout_seconds=60, logger=quiet_logger())


class SteadyPublisher:
    """Sends ids 0..total-1 as sequence ids at a steady pace from a thread, and never gives
    up on one (``send_timeout_millis=0``): the client resends across any reconnect."""

    def __init__(
        self, client: pulsar.Client, topic: str, name: str, total: int, per_second: float
    ) -> None:
        self.total = total
        self.interval = 1.0 / per_second
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.producer = client.create_producer(
            topic,
            producer_name=name,
            send_timeout_millis=0,
            batching_enabled=False,
            max_pending_messages=10_000,
        )
        self.thread = threading.Thread(target=self._run, name=f"publish-{name}", daemon=True)

    def start(self) -> SteadyPublisher:
        self.thread.start()
        return self

    def acknowledged(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for(self, count: int, timeout: float) -> None:
        """Until ``count`` sends are acknowledged."""
        deadline = time.monotonic() + timeout
        while self.acknowledged() < count:
            assert not self.errors, self.errors[:5]
            assert time.monotonic() < deadline, f"{self.acknowledged()} of {count} acknowledged"
            time.sleep(0.05)

    def wait_all(self, timeout: float) -> None:
        self.thread.join(timeout)
        self.wait_for(self.total, timeout)

    def _run(self) -> None:
        def acked(index: int) -> object:
            def callback(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
                with self.lock:
                    if result == pulsar.Result.Ok:
                        self.acked.append(index)
                    else:
                        self.errors.append(f"{index}: {result}")

            return callback

        next_at = time.monotonic()
        for index in range(self.total):
            self.producer.send_async(str(index).encode(), acked(index), sequence_id=index)
            next_at += self.interval
            time.sleep(max(next_at - time.monotonic(), 0))


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    """Everything the topic stores, read from the earliest message."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(30_000).data())
        return out
    finally:
        reader.close()


def assert_exactly_once(stored: list[bytes], total: int) -> None:
    """Every id 0..total-1 once, in order: nothing lost, nothing duplicated."""
    ids = [int(value) for value in stored]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    missing = sorted(set(range(total)) - set(ids))
    assert not duplicates and not missing, (
        f"{len(ids)} stored; duplicated {duplicates[:10]}, missing {missing[:10]}"
    )
    assert ids == list(range(total)), "out of order"


def owner_port(http_urls: list[str], topic: str, timeout: float = 60.0) -> int:
    """The Pulsar port of the broker serving ``topic``, as the first answering broker's
    HTTP lookup says (a broker being killed or a rebalance answer is asked again)."""
    tenant, namespace, local = topic.removeprefix("persistent://").split("/", 2)
    path = f"/lookup/v2/topic/persistent/{tenant}/{namespace}/{local}"
    deadline = time.monotonic() + timeout
    while True:
        for url in http_urls:
            try:
                with urllib.request.urlopen(url + path, timeout=5) as reply:
                    data = json.loads(reply.read())
                return int(str(data["brokerUrl"]).rsplit(":", 1)[-1])
            except (OSError, ValueError, KeyError):
                continue
        assert time.monotonic() < deadline, f"no broker answered a lookup of {topic}"
        time.sleep(0.5)


def ledger_leader(bootstrap_servers: str, cluster_name: str) -> int:
    """The Kafka node leading the newest ledger topic of ``cluster_name``: the node whose
    death the topic's appends feel first."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 2})
    topics = admin.list_topics(timeout=15).topics
    prefix = f"{cluster_name}.ledger."
    ledgers = [name for name in topics if name.startswith(prefix) and name[len(prefix) :].isdigit()]
    assert ledgers, f"no ledger topics of {cluster_name} in {sorted(topics)}"
    newest = max(ledgers, key=lambda name: int(name[len(prefix) :]))
    return int(topics[newest].partitions[0].leader)


def partitions_with_leader(bootstrap_servers: str, node_id: int) -> int:
    """How many partitions ``node_id`` leads now."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 2})
    topics = admin.list_topics(timeout=15).topics
    return sum(
        1 for topic in topics.values() for p in topic.partitions.values() if p.leader == node_id
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def cluster_settings(cluster_name: str) -> dict[str, object]:
    """Broker settings of one test's cluster on a shared Kafka: deletion topics of its own."""
    return {
        "two_phase_deletion_topic": f"{cluster_name}.__ledger_deletion",
        "two_phase_deletion_retry_topic": f"{cluster_name}.__ledger_deletion-RETRY",
        "two_phase_deletion_dead_letter_topic": f"{cluster_name}.__ledger_deletion-DLQ",
    }
