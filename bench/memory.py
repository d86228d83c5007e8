"""``make bench`` (memory): the broker's resident set per idle topic and per PIP-6 producer.

One Kafka, one broker process with ``brokerDeduplicationEnabled=true``:

1. after start-up and a warm-up (a few topics loaded and left, so that code paths and
   caches are in place), the broker's RSS (``VmRSS`` from /proc) is the baseline;
2. idle topics: N topics are loaded, each with one message published by a producer that
   is then closed (with ``--subscription``, each also gets a durable subscription, whose
   consumer is closed too: its cursor stays). Persistent topics stay loaded until they
   are unloaded or deleted (the broker has no idle-topic unloading for them), so they
   are counted with the broker's ``pulsar_topics_count`` gauge. ``(RSS after - RSS
   before) / N`` is the cost of one idle topic; the wall time of the loading is reported
   too (each topic creates a ledger topic in Kafka, which is what takes the time). With
   ``--connected``, a producer (and, with ``--subscription``, a consumer of that
   subscription) then connects to each idle topic and stays connected while the RSS is
   read again: the cost of a connected, idle client per topic;
3. PIP-6 producers: N producers with distinct names publish one message each to one
   topic and disconnect. Their high-water marks stay in the deduplication maps (and in
   the snapshot) until the inactivity timeout, so ``(RSS after - RSS before) / N`` is the
   cost of one remembered producer. The snapshot's stored size is the ``pulsar.dedup``
   cursor's properties (from ``internalStats``) encoded as the broker stores them.

Kafka's RSS is reported next to the broker's when Kafka runs as a native process.
Nothing is written into the repository; the broker's log goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar

from bench.results import record
from dedup_broker.config import BrokerConfig
from dedup_broker.devservers import provide_kafka
from dedup_broker.pip6.state import DEDUP_CURSOR
from dedup_broker.storage.formats import CursorRecord, encode_cursor_info
from dedup_broker.storage.values import Position
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
NAMESPACE = "persistent://public/default"
SETTLE_SECONDS = 5.0
"""Pause before each RSS reading: acknowledgements, snapshots and housekeeping settle."""
WARM_UP_TOPICS = 20


def loaded_topics(broker: BrokerProcess) -> int:
    """The broker's ``pulsar_topics_count`` gauge: the topics it has loaded."""
    status, body = http_request("GET", broker.http_url + "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics: HTTP {status}")
    found = re.search(rb"^pulsar_topics_count(?:\{[^}]*\})? ([0-9.e+]+)$", body, re.M)
    if found is None:
        raise RuntimeError("no pulsar_topics_count in /metrics")
    return int(float(found.group(1)))


def resident_kib(pid: int) -> int:
    """``VmRSS`` of ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Reading:
    """RSS of the broker (and of Kafka, when its pid is known) at one point."""

    broker_kib: int
    kafka_kib: int | None


class Probe:
    def __init__(self, broker: BrokerProcess, kafka_pid: int | None, traced: bool) -> None:
        self.broker = broker
        self.kafka_pid = kafka_pid
        self.traced = traced

    def read(self, settle: float = SETTLE_SECONDS) -> Reading:
        time.sleep(settle)
        assert self.broker.process is not None
        if self.traced:  # the broker logs an allocation report (dedup_broker.allocations)
            self.broker.process.send_signal(signal.SIGUSR1)
        kafka = resident_kib(self.kafka_pid) if self.kafka_pid is not None else None
        return Reading(resident_kib(self.broker.process.pid), kafka)

    def loaded_topics(self) -> int:
        return loaded_topics(self.broker)

    def internal_stats(self, name: str) -> dict[str, Any]:
        url = f"{self.broker.http_url}/admin/v2/persistent/public/default/{name}/internalStats"
        status, body = http_request("GET", url)
        if status != 200:
            raise RuntimeError(f"internalStats of {name}: HTTP {status}")
        stats: dict[str, Any] = json.loads(body)
        return stats


def exit_on_sigterm() -> None:
    """Make SIGTERM end the run like Ctrl-C: the ``finally`` blocks stop the brokers,
    the worker and Kafka this run started, instead of leaving them running."""

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def in_parallel(count: int, threads: int, one: Callable[[int], None]) -> float:
    """Run ``one(0..count-1)`` on ``threads`` threads; seconds taken. Reports progress."""
    done = [0]
    lock = threading.Lock()
    started = time.perf_counter()
    step = max(count // 10, 1)

    def counted(i: int) -> None:
        one(i)
        with lock:
            done[0] += 1
            if done[0] % step == 0:
                elapsed = time.perf_counter() - started
                print(f"  {done[0]}/{count} in {elapsed:.0f} s", flush=True)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(counted, range(count)))
    return time.perf_counter() - started


def _publish_once(client: pulsar.Client, topic: str, producer_name: str | None = None) -> None:
    """One producer, one message, closed: what leaves a topic loaded and idle."""
    producer = client.create_producer(
        topic, producer_name=producer_name, batching_enabled=False, send_timeout_millis=60_000
    )
    producer.send(b"hello", sequence_id=1)
    producer.close()


def idle_topics(
    probe: Probe, count: int, threads: int, subscription: str | None, idle_seconds: float
) -> tuple[dict[str, float], list[str]]:
    prefix = f"idle-{uuid.uuid4().hex[:6]}"
    names = [f"{NAMESPACE}/{prefix}-{i:06d}" for i in range(count)]
    client = pulsar.Client(probe.broker.service_url, operation_timeout_seconds=120, logger=QUIET)
    try:
        base_topics = probe.loaded_topics()
        before = probe.read()
        seconds, first = _publish_each(client, names, threads, subscription)
    finally:
        client.close()
    # Idle means idle: the broker drops a ledger not written to for that long from its
    # Kafka producer, and what librdkafka kept of it goes with the producer's renewal.
    after = probe.read(SETTLE_SECONDS + idle_seconds)
    loaded = probe.loaded_topics() - base_topics
    if loaded != count:
        raise RuntimeError(f"{loaded} idle topics loaded, expected {count}")
    figures = _per_item(count, before, after) | {"load_s": seconds}
    return figures | {"first_p50_s": first[len(first) // 2], "first_p99_s": _p99(first)}, names


def connected_clients(
    probe: Probe, names: list[str], threads: int, subscription: str | None
) -> dict[str, float]:
    """A producer (and a consumer of ``subscription``) connected to each idle topic and
    left idle: what each costs the broker while connected."""
    client = pulsar.Client(
        probe.broker.service_url,
        operation_timeout_seconds=120,
        connection_timeout_ms=60_000,  # a traced broker is busy with its report a while
        logger=QUIET,
    )
    kept: list[pulsar.Producer | pulsar.Consumer] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        clients: list[pulsar.Producer | pulsar.Consumer] = [
            client.create_producer(names[i], batching_enabled=False)
        ]
        if subscription is not None:
            clients.append(client.subscribe(names[i], subscription, receiver_queue_size=100))
        with lock:
            kept.extend(clients)

    try:
        before = probe.read()
        seconds = in_parallel(len(names), threads, one)
        after = probe.read()
        for producer_or_consumer in kept:
            producer_or_consumer.close()
    finally:
        client.close()
    return _per_item(len(names), before, after) | {"load_s": seconds}


def _p99(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _publish_each(
    client: pulsar.Client, names: list[str], threads: int, subscription: str | None = None
) -> tuple[float, list[float]]:
    """One producer per topic publishes one message and closes (then, with
    ``subscription``, a consumer creates that durable subscription and closes); the wall
    time of all, and each topic's publish time (sorted)."""
    took: list[float] = []

    def one(i: int) -> None:
        started = time.perf_counter()
        _publish_once(client, names[i])
        took.append(time.perf_counter() - started)
        if subscription is not None:
            client.subscribe(names[i], subscription).close()

    seconds = in_parallel(len(names), threads, one)
    return seconds, sorted(took)


def kafka_freeze(
    probe: Probe, kafka_pid: int, names: list[str], seconds: float, threads: int
) -> dict[str, float]:
    """Kafka frozen (SIGSTOP) for ``seconds`` with every topic loaded: afterwards every
    topic must still be loaded, and each takes a publish again."""
    before = probe.loaded_topics()
    os.kill(kafka_pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(kafka_pid, signal.SIGCONT)
    time.sleep(SETTLE_SECONDS)
    after = probe.loaded_topics()
    if after != before:
        raise RuntimeError(f"{before - after} topics were unloaded by a {seconds:.0f} s freeze")
    client = pulsar.Client(probe.broker.service_url, operation_timeout_seconds=120, logger=QUIET)
    try:
        wall, each = _publish_each(client, names, threads)
    finally:
        client.close()
    return {"loaded": after, "publish_all_s": wall, "publish_p99_s": _p99(each)}


def restart_reload(probe: Probe, names: list[str], threads: int) -> dict[str, float]:
    """The broker restarted: how long until every topic took a publish again (each one is
    loaded anew: ledger list, cursors, deduplication state)."""
    probe.broker.stop()
    probe.broker.start(timeout=300)
    client = pulsar.Client(probe.broker.service_url, operation_timeout_seconds=120, logger=QUIET)
    try:
        wall, each = _publish_each(client, names, threads)
    finally:
        client.close()
    return {"reload_all_s": wall, "reload_p50_s": each[len(each) // 2], "reload_p99_s": _p99(each)}


def pip6_producers(probe: Probe, count: int, threads: int) -> dict[str, float]:
    name = f"pip6-{uuid.uuid4().hex[:6]}"
    topic = f"{NAMESPACE}/{name}"
    client = pulsar.Client(probe.broker.service_url, operation_timeout_seconds=120, logger=QUIET)
    try:
        _publish_once(client, topic, "device-first")  # loads the topic, recovers its state
        before = probe.read()
        seconds = in_parallel(
            count, threads, lambda i: _publish_once(client, topic, f"device-{i:06d}")
        )
    finally:
        client.close()
    after = probe.read()
    tracked = probe.internal_stats(name)["deduplication"]["producers"]
    if tracked != count + 1:
        raise RuntimeError(f"{tracked} producers tracked, expected {count + 1}")
    snapshot = _dedup_snapshot(probe, name, tracked)
    stored = encode_cursor_info(CursorRecord(Position(0, 0), [], snapshot, int(time.time())))
    return _per_item(count, before, after) | {
        "load_s": seconds,
        "snapshot_producers": len(snapshot),
        "snapshot_bytes": len(stored),
    }


def _dedup_snapshot(probe: Probe, name: str, producers: int) -> dict[str, int]:
    """The stored snapshot's producers, once a timed snapshot covers all of them."""
    url = f"{probe.broker.http_url}/admin/v2/persistent/public/default/{name}"
    status, _ = http_request("POST", url + "/deduplicationSnapshotInterval", b"1")
    if status not in (200, 204):
        raise RuntimeError(f"setting the snapshot interval of {name}: HTTP {status}")
    deadline = time.monotonic() + 30
    while True:
        cursors = probe.internal_stats(name)["cursors"]
        snapshot: dict[str, int] = cursors.get(DEDUP_CURSOR, {}).get("properties", {})
        if len(snapshot) >= producers or time.monotonic() > deadline:
            return snapshot
        time.sleep(1)


def _per_item(count: int, before: Reading, after: Reading) -> dict[str, float]:
    figures = {
        "count": count,
        "before_mib": before.broker_kib / 1024,
        "after_mib": after.broker_kib / 1024,
        "bytes_each": (after.broker_kib - before.broker_kib) * 1024 / count,
    }
    if before.kafka_kib is not None and after.kafka_kib is not None:
        figures["kafka_growth_mib"] = (after.kafka_kib - before.kafka_kib) / 1024
    return figures


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m bench.memory")
    parser.add_argument("--topics", type=int, default=10_000, help="idle topics (0: skip)")
    parser.add_argument("--producers", type=int, default=10_000, help="PIP-6 producers (0: skip)")
    parser.add_argument("--threads", type=int, default=16, help="client threads loading")
    parser.add_argument(
        "--reload-threads",
        type=int,
        default=64,
        help="client threads publishing again after the restart (every topic's clients "
        "reconnect at once then; fewer threads would make the client the bottleneck)",
    )
    parser.add_argument(
        "--subscription",
        action="store_true",
        help="each idle topic also gets a durable subscription (a cursor, loaded with it)",
    )
    parser.add_argument(
        "--connected",
        action="store_true",
        help="then connect a producer (and, with --subscription, a consumer) to each idle "
        "topic and read the RSS again while they stay connected",
    )
    parser.add_argument(
        "--idle-seconds",
        type=int,
        default=BrokerConfig().kafka_producer_idle_topic_seconds,
        help="the broker's kafkaProducerIdleTopicSeconds; the idle topics' RSS is read this "
        "long after the last was loaded",
    )
    parser.add_argument("--quick", action="store_true", help="500 of each: a smoke run")
    parser.add_argument(
        "--kafka-heap",
        default="2g",
        help="-Xmx of the native Kafka started for the run (thousands of topics need more "
        "than the test Kafka's 512m)",
    )
    parser.add_argument(
        "--kafka-freeze",
        type=float,
        default=10.0,
        help="seconds Kafka is frozen (SIGSTOP) once the idle topics are loaded (0: skip)",
    )
    parser.add_argument(
        "--no-reload",
        dest="reload",
        action="store_false",
        help="skip restarting the broker and publishing to every idle topic again",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace the broker's allocations and print where they grew (RSS then includes "
        "the traces: use a run without it for the figures)",
    )
    args = parser.parse_args()
    if args.quick:
        args.topics, args.producers = min(args.topics, 500), min(args.producers, 500)
    kafka = provide_kafka(native_heap=args.kafka_heap)
    if args.tracemalloc:  # inherited by the broker process only (Kafka runs already)
        os.environ["PYTHONTRACEMALLOC"] = "1"
    rows: list[tuple[str, dict[str, float]]] = []
    extra: list[str] = []
    names: list[str] = []
    try:
        broker = BrokerProcess(
            kafka.bootstrap_servers,
            cluster_name=f"bench-{uuid.uuid4().hex[:6]}",
            settings={
                "broker_deduplication_enabled": True,
                # Every producer is remembered: the limit is what a snapshot keeps.
                "broker_deduplication_max_number_of_producers": max(args.producers + 1, 10_000),
                # The broker's default session: a busy Kafka creating thousands of topics,
                # or one frozen for seconds, must not cost the broker its slots.
                "metadata_store_session_timeout_millis": 30000,
                "kafka_producer_idle_topic_seconds": args.idle_seconds,
            },
            log_dir=Path(tempfile.mkdtemp(prefix="bench-memory-")),
        )
        with broker:
            probe = Probe(broker, kafka.pid, args.tracemalloc)
            started = probe.read(0)
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=120, logger=QUIET)
            warm = f"warm-{uuid.uuid4().hex[:6]}"
            for i in range(WARM_UP_TOPICS):
                _publish_once(client, f"{NAMESPACE}/{warm}-{i}")
            client.close()
            warmed = probe.read()
            print(
                f"broker RSS after start-up {started.broker_kib / 1024:.1f} MiB, "
                f"after warm-up ({WARM_UP_TOPICS} topics) {warmed.broker_kib / 1024:.1f} MiB",
                flush=True,
            )
            if args.topics > 0:
                print(f"loading {args.topics} idle topics", flush=True)
                subscription = "idle" if args.subscription else None
                figures, names = idle_topics(
                    probe, args.topics, args.threads, subscription, args.idle_seconds
                )
                rows.append(("idle topics", figures))
                if args.connected:
                    print("connecting a client to each idle topic", flush=True)
                    what = "producer+consumer" if subscription else "producer"
                    rows.append(
                        (
                            f"connected {what}",
                            connected_clients(probe, names, args.threads, subscription),
                        )
                    )
                if args.kafka_freeze > 0 and kafka.pid is not None:
                    print(f"Kafka frozen for {args.kafka_freeze:.0f} s", flush=True)
                    frozen = kafka_freeze(probe, kafka.pid, names, args.kafka_freeze, args.threads)
                    extra.append(
                        f"Kafka frozen {args.kafka_freeze:.0f} s: {frozen['loaded']:.0f} topics "
                        f"still loaded; a publish to each of them again took "
                        f"{frozen['publish_all_s']:.0f} s (p99 {frozen['publish_p99_s']:.2f} s)"
                    )
                extra.append(
                    f"first publish to a new topic (load included): p50 "
                    f"{figures['first_p50_s']:.2f} s, p99 {figures['first_p99_s']:.2f} s"
                )
            if args.producers > 0:
                print(f"{args.producers} PIP-6 producers on one topic", flush=True)
                rows.append(
                    ("PIP-6 producers", pip6_producers(probe, args.producers, args.threads))
                )
            time.sleep(2 if args.tracemalloc else 0)  # the last report is logged
            reports = _allocation_reports(broker.log_text()) if args.tracemalloc else []
            if args.topics > 0 and args.reload:
                print(f"restarting the broker, publishing to {args.topics} topics", flush=True)
                reload = restart_reload(probe, names, args.reload_threads)
                extra.append(
                    f"after a restart, every topic took a publish again within "
                    f"{reload['reload_all_s']:.0f} s (each: p50 {reload['reload_p50_s']:.2f} s, "
                    f"p99 {reload['reload_p99_s']:.2f} s)"
                )
    finally:
        kafka.stop()
    _report(rows)
    for line in extra:
        print(line)
    for report in reports:
        print("\n" + report)
    if rows:
        record("bench.memory", recorded(rows, args))


def recorded(rows: list[tuple[str, dict[str, float]]], args: argparse.Namespace) -> dict[str, Any]:
    """What ``bench.plots`` draws: per row of the table, its figures (``bytes_each``: the
    broker's RSS growth per topic or producer), and what each idle topic had."""
    return {
        "subscription": bool(args.subscription),
        "connected": bool(args.connected),
        "tracemalloc": bool(args.tracemalloc),
        "rows": [{"label": label, **figures} for label, figures in rows],
    }


def _allocation_reports(log_text: str) -> list[str]:
    """The broker's tracemalloc reports, each with its indented lines."""
    reports: list[str] = []
    for line in log_text.splitlines():
        if "tracemalloc:" in line:
            reports.append(line[line.index("tracemalloc:") :])
        elif reports and line.startswith("  "):
            reports[-1] += "\n" + line
    return reports


def _report(rows: list[tuple[str, dict[str, float]]]) -> None:
    print(
        f"\n{'':27} {'N':>7} {'load s':>7} {'per s':>6} {'RSS before':>11} "
        f"{'RSS after':>10} {'bytes each':>11} {'Kafka RSS +':>12}"
    )
    for label, r in rows:
        kafka = f"{r['kafka_growth_mib']:9.1f} MiB" if "kafka_growth_mib" in r else "n/a"
        print(
            f"{label:27} {r['count']:7.0f} {r['load_s']:7.1f} {r['count'] / r['load_s']:6.0f} "
            f"{r['before_mib']:7.1f} MiB {r['after_mib']:6.1f} MiB {r['bytes_each']:11.0f} "
            f"{kafka:>12}"
        )
    for label, r in rows:
        if "snapshot_bytes" in r:
            print(
                f"\n{label}: the deduplication snapshot holds {r['snapshot_producers']:.0f} "
                f"producers, {r['snapshot_bytes'] / 1024:.0f} KiB as stored"
            )


if __name__ == "__main__":
    main()
