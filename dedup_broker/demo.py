"""The main job: Kafka, Redis and the broker, a pipeline through it, a crash, a summary.

Starts (or reuses) a real Kafka and Redis, runs the broker as its own process, publishes
events with the official Pulsar client while the broker is ``kill -9``ed and restarted,
consumes them through a durable subscription, and reports what arrived.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pulsar

from dedup_broker.devservers import provide_kafka, provide_redis
from dedup_broker.testing.broker_process import BrokerProcess

RECEIVE_MS = 30_000


def run_demo(args: argparse.Namespace) -> int:
    total = int(args.messages)
    print("dedup-broker demo: starting Kafka and Redis (first run downloads Kafka) ...")
    kafka = provide_kafka()
    redis = provide_redis()
    work_dir = Path(tempfile.mkdtemp(prefix="dedup-broker-demo-"))
    try:
        print(f"  Kafka: {kafka.bootstrap_servers} ({kafka.kind})")
        print(f"  Redis: {redis.url} ({redis.kind})")
        broker = BrokerProcess(
            kafka.bootstrap_servers,
            cluster_name=f"demo-{uuid.uuid4().hex[:8]}",
            settings={"broker_deduplication_enabled": True, "redis_url": redis.url},
            log_dir=work_dir,
        )
        broker.start()
        print(f"  broker: {broker.service_url}, admin {broker.http_url}, logs in {work_dir}")
        try:
            return _pipeline(broker, total)
        finally:
            broker.stop()
    finally:
        redis.stop()
        kafka.stop()


def _pipeline(broker: BrokerProcess, total: int) -> int:
    topic = f"persistent://public/default/demo-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(
            topic, "demo-results", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(
            topic,
            producer_name="demo-source",
            send_timeout_millis=0,
            batching_enabled=True,
            max_pending_messages=2000,
            block_if_queue_full=True,
        )
        sent = 0
        failures: list[str] = []
        all_sent = threading.Event()

        def acknowledged(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
            nonlocal sent
            if result != pulsar.Result.Ok:
                failures.append(str(result))
            sent += 1
            if sent == total:
                all_sent.set()

        def publish() -> None:
            for i in range(total):
                producer.send_async(f"event-{i}".encode(), acknowledged, sequence_id=i)
            all_sent.wait()

        started = time.monotonic()
        worker = threading.Thread(target=publish, daemon=True)
        worker.start()
        while sent < total // 2 and worker.is_alive():
            time.sleep(0.05)
        print(f"  published {sent}/{total}; now kill -9 the broker and restart it ...")
        broker.kill()
        broker.start()
        print("  broker restarted; the producer reconnects and resends what was pending")
        while worker.is_alive():
            worker.join(timeout=5)
            print(f"  published {sent}/{total}")
        if failures:
            print(f"  publishing failed: {failures[0]}")
            return 1
        applied, redelivered = _consume_once(consumer, total)
        stored = _read_topic(client, topic)
        expected = {f"event-{i}" for i in range(total)}
        duplicates = len(stored) - len(set(stored))
        missing = len(expected - set(stored))
        elapsed = time.monotonic() - started
        print()
        print("summary")
        print(f"  events in:        {total}")
        print(f"  messages stored:  {len(stored)}")
        print(f"  duplicates:       {duplicates}")
        print(f"  missing:          {missing}")
        print(f"  results applied:  {len(applied)}")
        print(f"  redeliveries skipped by message id: {redelivered}")
        print("  broker crashes:   1 (kill -9)")
        print(f"  elapsed:          {elapsed:.1f}s")
        if applied != expected:
            return 1
        return 0 if duplicates == 0 and missing == 0 else 1
    finally:
        client.close()


def _consume_once(consumer: pulsar.Consumer, total: int) -> tuple[set[str], int]:
    """Apply each message once: a redelivery (same message id) is recognised and skipped."""
    applied: set[str] = set()
    seen_ids: set[tuple[int, int, int]] = set()
    redelivered = 0
    while len(applied) < total:
        try:
            msg = consumer.receive(RECEIVE_MS)
        except pulsar.Timeout:
            break
        mid = msg.message_id()
        key = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
        if key in seen_ids:
            redelivered += 1
        else:
            seen_ids.add(key)
            applied.add(msg.data().decode())
            if len(applied) % 5000 == 0:
                print(f"  consumed {len(applied)}")
        consumer.acknowledge(msg)
    return applied, redelivered


def _read_topic(client: pulsar.Client, topic: str) -> list[str]:
    """Everything the topic holds, read back from the start."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    stored = []
    while reader.has_message_available():
        stored.append(reader.read_next(RECEIVE_MS).data().decode())
    reader.close()
    return stored
