"""The demo pipeline's core with the broker as a container of the broker image.

Rows go through the broker with deduplication on; a restarted producer replays part of
them under the same name and sequence ids (as the demo's Spark query does after a kill -9
mid-batch), the broker container is killed with sends in flight and started again; then
the demo's effectively-once consumer applies the topic to SQLite. Every row is stored and
applied exactly once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pulsar

from dedup_broker.devservers.containers import BrokerInDocker, KafkaClusterInDocker, RedisInDocker
from examples.demo.results import consume_into_results, results_summary
from tests.containers import traffic

ROWS = 2000
FIRST_RUN = 1200
"""The first producer stops (is killed) after these rows were acknowledged."""
REPLAY_FROM = 800
"""Where the restarted producer starts again: rows 800..1199 are sent twice."""
KILL_AT = 1600
"""The broker container is killed with the rows from here on in flight."""
SEND_TIMEOUT = 180.0


class Sends:
    """Receipts of ``send_async`` calls: which ids were acknowledged, how many as duplicates."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[int] = set()
        self.duplicates = 0
        self.errors: list[str] = []

    def callback(self, index: int) -> object:
        def done(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            with self.lock:
                if result != pulsar.Result.Ok:
                    self.errors.append(f"{index}: {result}")
                    return
                self.acked.add(index)
                # PIP-6: a duplicate's receipt carries no position (ledger and entry -1).
                self.duplicates += int(message_id.ledger_id() < 0)

        return done

    def wait(self, ids: range) -> None:
        deadline = time.monotonic() + SEND_TIMEOUT
        while True:
            with self.lock:
                assert not self.errors, self.errors[:5]
                if set(ids) <= self.acked:
                    return
                done = len(self.acked & set(ids))
            assert time.monotonic() < deadline, f"{done} of {len(ids)} acknowledged"
            time.sleep(0.05)


def _row(index: int) -> bytes:
    event = {"id": index, "user": f"user-{index % 50}", "amount": (index * 37) % 1000 / 10}
    return json.dumps(event).encode()


def _producer(client: pulsar.Client, topic: str) -> pulsar.Producer:
    return client.create_producer(
        topic,
        producer_name="demo-query-0",
        batching_enabled=False,
        send_timeout_millis=0,
        max_pending_messages=ROWS,
    )


def test_demo_core_exactly_once_through_the_broker_image(
    kafka_single: KafkaClusterInDocker, tmp_path: Path
) -> None:
    cluster = traffic.unique("pipeline")
    redis = RedisInDocker()
    redis.start()
    settings = {"broker_deduplication_enabled": True, "redis_url": redis.url}
    broker = BrokerInDocker(
        kafka_single.bootstrap_servers, cluster, settings | traffic.cluster_settings(cluster)
    )
    clients: list[pulsar.Client] = []
    try:
        broker.start()
        topic = f"persistent://public/default/{traffic.unique('demo')}"

        first_run, second_run = Sends(), Sends()
        clients.append(traffic.client(broker.service_url))
        producer = _producer(clients[-1], topic)
        for index in range(FIRST_RUN):
            producer.send_async(_row(index), first_run.callback(index), sequence_id=index)
        first_run.wait(range(FIRST_RUN))
        clients.pop().close()  # the query dies; its replacement starts from the checkpoint

        clients.append(traffic.client(broker.service_url))
        producer = _producer(clients[-1], topic)
        for index in range(REPLAY_FROM, ROWS):
            if index == KILL_AT:
                broker.kill()
                broker.start()
            producer.send_async(_row(index), second_run.callback(index), sequence_id=index)
        second_run.wait(range(REPLAY_FROM, ROWS))
        assert second_run.duplicates >= FIRST_RUN - REPLAY_FROM

        stored = [json.loads(value)["id"] for value in traffic.read_all(clients[-1], topic)]
        assert stored == list(range(ROWS))

        database = tmp_path / "results.db"
        stats = consume_into_results(broker.service_url, topic, database, ROWS, threading.Event())
        assert stats.applied == ROWS
        assert results_summary(database) == (ROWS, ROWS)
    finally:
        for client in clients:
            client.close()
        broker.stop()
        redis.stop()
