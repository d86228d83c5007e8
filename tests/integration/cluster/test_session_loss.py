"""Kafka frozen for longer than the owners group's session: the broker keeps its topics.

Pulsar keeps a broker's bundles across a lost metadata session (its ``reconnect``
policy); a broker here must do the same when its group session expires because Kafka
answered nothing for a while: unloading every topic would cost every client a reconnect
and the broker a reload of everything, for a slot the group gives straight back.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from bench.memory import loaded_topics
from dedup_broker.devservers import KafkaService
from tests.integration.conftest import make_broker

TOPICS = 24
SESSION_MS = 6000
FREEZE_SECONDS = 10.0


@pytest.mark.chaos
def test_a_lost_group_session_keeps_every_topic_loaded_and_serving(
    native_kafka: KafkaService, tmp_path: Path
) -> None:
    broker = make_broker(
        native_kafka.bootstrap_servers,
        tmp_path,
        metadata_store_session_timeout_millis=SESSION_MS,
        broker_deduplication_enabled=True,
    )
    broker.start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    try:
        names = [
            f"persistent://public/default/held-{i}-{uuid.uuid4().hex[:6]}" for i in range(TOPICS)
        ]
        consumers = [client.subscribe(name, "held") for name in names]
        producers = [
            client.create_producer(name, producer_name=f"p{i}", batching_enabled=False)
            for i, name in enumerate(names)
        ]
        for i, producer in enumerate(producers):
            producer.send(b"before", sequence_id=0)
            assert consumers[i].receive(30_000).data() == b"before"
        loaded = loaded_topics(broker)
        assert loaded >= TOPICS
        log_before = len(broker.log_text())

        pid = native_kafka.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_SECONDS)
        finally:
            os.kill(pid, signal.SIGCONT)

        # Each connected producer is acknowledged again, each consumer gets exactly its
        # message, on the same connections.
        for producer in producers:
            producer.send(b"after", sequence_id=1)
        for consumer in consumers:
            message = consumer.receive(60_000)
            assert message.data() == b"after"
            consumer.acknowledge(message)
        for consumer in consumers:
            with pytest.raises(pulsar.Timeout):
                consumer.receive(100)

        log_after = broker.log_text()[log_before:]
        assert "group session lost" in log_after, "the freeze did not cost the session"
        deadline = time.monotonic() + 60
        while "assigned here again" not in log_after:
            assert time.monotonic() < deadline, log_after[-3000:]
            time.sleep(0.5)
            log_after = broker.log_text()[log_before:]
        assert "unloaded" not in log_after, log_after[-3000:]
        assert loaded_topics(broker) == loaded
        # A topic new to the broker loads and takes a publish too.
        fresh = client.create_producer(f"persistent://public/default/fresh-{uuid.uuid4().hex[:6]}")
        fresh.send(b"fresh")
    finally:
        client.close()
        broker.stop()
