"""``make bench`` (many topics): N topics on a cluster of B brokers on one Kafka, each
with a connected producer and a connected consumer of a durable subscription.

The brokers run with ``managedLedgerInactiveLedgerRolloverTimeSeconds`` (an idle ledger
closes, the next append creates the next one, a consumed closed ledger is trimmed) and
deduplication on; a deletion worker deletes the trimmed ledgers' Kafka topics. Phases:

1. load: for each topic, a producer and a consumer connect (both stay connected), the
   producer publishes one message and the consumer receives and acknowledges it. The
   time from creating the producer to the publish's receipt is the topic's first
   publish;
2. idle: the topics are left alone until their ledgers have been closed, trimmed and
   deleted (or a time limit passed);
3. again: every producer publishes one more message, and every consumer must receive
   exactly that message: nothing lost, nothing twice.

All along, a sampler records the Kafka topics holding ledgers of the cluster and
Kafka's open files (``/proc/<pid>/fd``, next to its hard limit): the point of the lazy
ledgers is that the partitions Kafka holds follow the topics written to lately, not all
topics. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
from confluent_kafka.admin import AdminClient

from bench.memory import QUIET, exit_on_sigterm, in_parallel, loaded_topics, resident_kib
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers import provide_kafka
from harness.cluster_processes import ClusterProcesses
from harness.worker_process import WorkerProcess

NAMESPACE = "persistent://public/default"
RECEIVE_MS = 120_000
REPORT_EVERY_S = 120.0
"""How often the sampler prints what it saw so far (a run takes an hour or more)."""


@dataclass
class Samples:
    """What the sampler saw: the most ledger topics and open files, and the last count."""

    ledger_topics_max: int = 0
    ledger_topics_last: int = 0
    kafka_files_max: int = 0
    timeline: list[tuple[float, int, int]] = field(default_factory=list)


class Sampler(threading.Thread):
    def __init__(self, bootstrap: str, cluster: str, kafka_pid: int | None, every: float) -> None:
        super().__init__(daemon=True)
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._prefix = f"{cluster}.ledger."
        self._kafka_pid = kafka_pid
        self._every = every
        self._halt = threading.Event()
        self.samples = Samples()
        self._since = time.monotonic()

    def ledger_topics(self) -> int:
        topics = self._admin.list_topics(timeout=60).topics
        return sum(1 for name in topics if name.startswith(self._prefix))

    def _open_files(self) -> int:
        if self._kafka_pid is None:
            return 0
        return len(os.listdir(f"/proc/{self._kafka_pid}/fd"))

    def sample(self) -> None:
        ledgers, files = self.ledger_topics(), self._open_files()
        s = self.samples
        s.ledger_topics_max = max(s.ledger_topics_max, ledgers)
        s.ledger_topics_last = ledgers
        s.kafka_files_max = max(s.kafka_files_max, files)
        s.timeline.append((time.monotonic() - self._since, ledgers, files))

    def run(self) -> None:
        reported = time.monotonic()
        while not self._halt.wait(self._every):
            try:
                self.sample()
            except Exception as exc:  # a sample missed is reported, the run goes on
                print(f"  (sample failed: {exc})", flush=True)
                continue
            if time.monotonic() - reported >= REPORT_EVERY_S:
                reported = time.monotonic()
                s = self.samples
                print(
                    f"  [{s.ledger_topics_last} ledger topics in Kafka, at most "
                    f"{s.ledger_topics_max}; Kafka's open files at most {s.kafka_files_max}]",
                    flush=True,
                )

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=120)


@dataclass
class Topic:
    name: str
    producer: pulsar.Producer
    consumer: pulsar.Consumer


def _p(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _receive_exactly(consumer: pulsar.Consumer, expected: bytes) -> None:
    message = consumer.receive(RECEIVE_MS)
    if message.data() != expected:
        raise RuntimeError(f"{consumer.topic()}: received {message.data()!r}, not {expected!r}")
    consumer.acknowledge(message)


def load(clients: list[pulsar.Client], count: int, threads: int) -> tuple[list[Topic], list[float]]:
    prefix = f"many-{uuid.uuid4().hex[:6]}"
    topics: list[Topic | None] = [None] * count
    first: list[float] = []

    def one(i: int) -> None:
        client = clients[i % len(clients)]
        name = f"{NAMESPACE}/{prefix}-{i:06d}"
        consumer = client.subscribe(name, "sub", receiver_queue_size=10)
        started = time.perf_counter()
        producer = client.create_producer(name, batching_enabled=False, send_timeout_millis=120_000)
        producer.send(b"first")
        first.append(time.perf_counter() - started)
        _receive_exactly(consumer, b"first")
        topics[i] = Topic(name, producer, consumer)

    in_parallel(count, threads, one)
    return [t for t in topics if t is not None], sorted(first)


def publish_again(topics: list[Topic], threads: int) -> tuple[float, list[float]]:
    took: list[float] = []

    def one(i: int) -> None:
        started = time.perf_counter()
        topics[i].producer.send(b"again")
        took.append(time.perf_counter() - started)
        _receive_exactly(topics[i].consumer, b"again")

    wall = in_parallel(len(topics), threads, one)
    return wall, sorted(took)


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench.many_topics")
    parser.add_argument("--topics", type=int, default=30_000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16, help="client threads")
    parser.add_argument("--clients", type=int, default=4, help="pulsar.Client instances")
    parser.add_argument(
        "--inactive-seconds",
        type=int,
        default=30,
        help="the brokers' managedLedgerInactiveLedgerRolloverTimeSeconds",
    )
    parser.add_argument(
        "--idle-limit",
        type=float,
        default=300,
        help="longest wait, after loading, for the idle topics' ledgers to leave Kafka",
    )
    parser.add_argument("--kafka-heap", default="3g")
    args = parser.parse_args()

    kafka = provide_kafka(native_heap=args.kafka_heap)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-many-topics-"))
    settings: dict[str, object] = {
        "managed_ledger_inactive_ledger_rollover_time_seconds": args.inactive_seconds,
        "broker_deduplication_enabled": True,
        "broker_deduplication_snapshot_interval_seconds": args.inactive_seconds,
        "two_phase_deletion_reconsume_later_in_seconds": 5,
        "kafka_producer_idle_topic_seconds": args.inactive_seconds,
        # The brokers' default, not the tests' 3 s: on a saturated machine a broker's
        # heartbeat may be late by more than that without the broker being gone.
        "cluster_peer_timeout_millis": BrokerConfig().cluster_peer_timeout_millis,
    }
    cluster = ClusterProcesses(kafka.bootstrap_servers, log_dir, args.brokers, settings)
    worker = WorkerProcess(kafka.bootstrap_servers, cluster.cluster_name, settings, log_dir)
    lines: list[str] = []
    try:
        cluster.start()
        worker.start()
        sampler = Sampler(kafka.bootstrap_servers, cluster.cluster_name, kafka.pid, 5.0)
        sampler.start()
        clients = [
            pulsar.Client(cluster.service_url, operation_timeout_seconds=120, logger=QUIET)
            for _ in range(args.clients)
        ]
        try:
            print(f"loading {args.topics} topics on {args.brokers} brokers", flush=True)
            started = time.perf_counter()
            topics, first = load(clients, args.topics, args.threads)
            load_s = time.perf_counter() - started
            per_broker = [loaded_topics(broker) for broker in cluster]
            rss_mib = [resident_kib(b.process.pid) / 1024 for b in cluster if b.process]
            lines.append(
                f"{len(topics)} topics loaded in {load_s:.0f} s ({len(topics) / load_s:.0f}/s), "
                f"per broker {per_broker}; first publish p50 {_p(first, 0.5):.2f} s, "
                f"p99 {_p(first, 0.99):.2f} s; brokers' RSS {[round(r) for r in rss_mib]} MiB"
            )
            print("idle: waiting for the ledgers to leave Kafka", flush=True)
            deadline = time.monotonic() + args.idle_limit
            idle_started = time.monotonic()
            while time.monotonic() < deadline:
                time.sleep(10)
                sampler.sample()
                print(f"  {sampler.samples.ledger_topics_last} ledger topics", flush=True)
                if sampler.samples.ledger_topics_last <= args.topics // 100:
                    break
            lines.append(
                f"idle: {sampler.samples.ledger_topics_last} ledger topics in Kafka "
                f"{time.monotonic() - idle_started:.0f} s after the load"
            )
            print("publishing to every topic again", flush=True)
            wall, again = publish_again(topics, args.threads)
            lines.append(
                f"a publish to each again, each received exactly once: {wall:.0f} s "
                f"(p50 {_p(again, 0.5):.2f} s, p99 {_p(again, 0.99):.2f} s); topics still "
                f"loaded per broker {[loaded_topics(broker) for broker in cluster]}"
            )
        finally:
            for client in clients:
                client.close()
            sampler.stop()
        samples = sampler.samples
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        lines.append(
            f"Kafka held at most {samples.ledger_topics_max} ledger topics and "
            f"{samples.kafka_files_max} open files (hard limit {hard})"
        )
    finally:
        worker.stop()
        cluster.stop()
        kafka.stop()
    print()
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
