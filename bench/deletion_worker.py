"""``make bench`` (deletion worker): ledgers one deletion worker deletes a second, with few
and with many other topics in Kafka, in one run on one Kafka.

A deletion worker runs in its own process. Each round creates N ledgers as a broker
creates them (an allocation record, the topic, its header) for managed ledgers that no
longer exist (the ledgers of deleted topics), waits until Kafka lists them all (ledgers
are trimmed long after they were created), writes the N intents to ``__ledger_deletion``
at once and measures the time until the worker has deleted N ledgers. Between the
rounds, filler topics are created, so the second round's Kafka holds many more topics:
the worker's rate must not depend on that. At the end of each round Kafka's controller
is asked which of the N ledger topics still exist (none should).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.memory import exit_on_sigterm
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers import provide_kafka
from dedup_broker.storage import formats
from dedup_broker.storage.kafka.admin import KafkaAdmin
from dedup_broker.storage.kafka.producer import SharedProducer
from dedup_broker.storage.kafka.reader import KafkaReader
from dedup_broker.storage.ledger.ledger_store import LedgerStore
from dedup_broker.storage.service.kafka_storage import internal_topics
from harness.admin_http import http_request
from harness.worker_process import WorkerProcess
from system_topics.intents import DeletionIntent, encode_intent
from system_topics.mark_phase import create_deletion_topics, intent_key
from system_topics.topics import DeletionTopics

DELETED = 'dedup_broker_ledger_deletion_ledgers_deleted_total{type="ledger"}'
FAILED = "dedup_broker_ledger_deletion_failed_total"
FILLER_BATCH = 500


def counter(worker: WorkerProcess, sample: str) -> int:
    """One sample of the worker's ``/metrics`` (0 before it was first counted)."""
    status, body = http_request("GET", worker.http_url + "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics: HTTP {status}")
    found = re.search(rb"^" + re.escape(sample.encode()) + rb" ([0-9.e+]+)$", body, re.M)
    return int(float(found.group(1))) if found else 0


def wait_listed(admin: AdminClient, prefix: str, count: int) -> None:
    """Until Kafka's broker lists ``count`` topics named ``prefix...``: it learns of many
    new topics up to a minute after its controller created them."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        known = admin.list_topics(timeout=60).topics
        if sum(1 for name in known if name.startswith(prefix)) >= count:
            return
        time.sleep(2)
    raise RuntimeError(f"Kafka did not list the {count} new topics within 300 s")


def add_filler_topics(bootstrap: str, count: int) -> None:
    """``count`` single-partition topics nobody uses: Kafka's metadata to carry along."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefix = f"filler-{uuid.uuid4().hex[:6]}"
    for start in range(0, count, FILLER_BATCH):
        names = [f"{prefix}.{i}" for i in range(start, min(count, start + FILLER_BATCH))]
        futures = admin.create_topics(
            [NewTopic(name, 1, 1) for name in names], operation_timeout=120, request_timeout=120
        )
        for future in futures.values():
            future.result()
    wait_listed(admin, prefix, count)


async def create_ledgers(config: BrokerConfig, count: int) -> list[DeletionIntent]:
    """``count`` ledgers of managed ledgers that are gone; the intents that delete them."""
    admin, reader = KafkaAdmin(config), KafkaReader(config)
    producer = SharedProducer(config, asyncio.get_running_loop())
    try:
        store = LedgerStore(config, "bench", producer, admin, reader)
        names = [f"public/default/persistent/gone-{i}" for i in range(count)]
        ids = await asyncio.gather(*(store.create(name) for name in names))
        return [DeletionIntent(name, ledger_id) for name, ledger_id in zip(names, ids, strict=True)]
    finally:
        await producer.close()
        await asyncio.to_thread(reader.close)


async def write_intents(config: BrokerConfig, intents: list[DeletionIntent]) -> None:
    producer = SharedProducer(config, asyncio.get_running_loop())
    topic = DeletionTopics.from_config(config).main
    try:
        await asyncio.gather(
            *(
                producer.send(topic, encode_intent(intent), key=intent_key(intent.ledger_id))
                for intent in intents
            )
        )
    finally:
        await producer.close()


def ledger_topics_left(bootstrap: str, cluster: str, intents: list[DeletionIntent]) -> int:
    """Ledger topics of ``intents`` that Kafka's controller still has (a validate-only
    creation fails for those; the brokers' metadata may list deleted ones a while)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [formats.ledger_topic(cluster, i.ledger_id) for i in intents]
    left = 0
    for start in range(0, len(names), FILLER_BATCH):
        chunk = [NewTopic(name, 1, 1) for name in names[start : start + FILLER_BATCH]]
        for future in admin.create_topics(chunk, validate_only=True).values():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                left += 1
    return left


def one_round(
    bootstrap: str, config: BrokerConfig, worker: WorkerProcess, ledgers: int, limit_s: float
) -> tuple[float, int, int]:
    """(deletions a second, failed attempts, ledger topics left) for ``ledgers`` intents,
    written once Kafka lists every ledger (as when ledgers are trimmed, long after they
    were created)."""
    intents = asyncio.run(create_ledgers(config, ledgers))
    wait_listed(
        AdminClient({"bootstrap.servers": bootstrap}), f"{config.cluster_name}.ledger.", ledgers
    )
    deleted, failed = counter(worker, DELETED), counter(worker, FAILED)
    started = time.perf_counter()
    asyncio.run(write_intents(config, intents))
    deadline = time.monotonic() + limit_s
    while counter(worker, DELETED) - deleted < ledgers and time.monotonic() < deadline:
        time.sleep(0.1)
    rate = (counter(worker, DELETED) - deleted) / (time.perf_counter() - started)
    left = ledger_topics_left(bootstrap, config.cluster_name, intents)
    return rate, counter(worker, FAILED) - failed, left


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench.deletion_worker")
    parser.add_argument("--ledgers", type=int, default=2_000, help="ledgers deleted per round")
    parser.add_argument("--filler", type=int, default=15_000, help="topics added between rounds")
    parser.add_argument("--limit", type=float, default=600, help="longest wait per round (s)")
    args = parser.parse_args()

    kafka = provide_kafka(native_heap="3g")
    bootstrap = kafka.bootstrap_servers
    cluster = f"bench-del-{uuid.uuid4().hex[:6]}"
    settings: dict[str, object] = {}
    worker = WorkerProcess(
        bootstrap, cluster, settings, Path(tempfile.mkdtemp(prefix="bench-deletion-"))
    )
    config = BrokerConfig.load(environ=worker.environment())
    lines: list[str] = []
    try:

        async def prepare() -> None:
            admin = KafkaAdmin(config)
            for topic, topic_config in internal_topics(config).items():
                await admin.create_topic(topic, topic_config)
            await create_deletion_topics(admin, DeletionTopics.from_config(config))

        asyncio.run(prepare())
        worker.start()
        for filler in (0, args.filler):
            if filler:
                print(f"adding {filler} topics to Kafka", flush=True)
                add_filler_topics(bootstrap, filler)
            held = len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60).topics)
            print(f"deleting {args.ledgers} ledgers, {held} topics in Kafka", flush=True)
            rate, failed, left = one_round(bootstrap, config, worker, args.ledgers, args.limit)
            lines.append(
                f"{args.ledgers} ledgers deleted by one worker with {held} topics in Kafka: "
                f"{rate:.0f}/s, {failed} failed attempts, {left} left in Kafka"
            )
    finally:
        worker.stop()
        kafka.stop()
    print()
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
