"""``make bench`` (PIP-6 state): recovery time and the memory of many producers.

Recovery: a topic gets N entries after its last deduplication snapshot (entry- and
time-based snapshots are switched off), the broker is killed with SIGKILL, restarted,
and the topic is loaded again. The broker's own figure (``lastRecoveryMillis`` in
``internalStats``) is the snapshot load plus the replay; the client-side figure adds the
topic load and the client's reconnect. ``--recoveries K`` kills and restarts K times over
the same entries (nothing is snapshotted in between) and reports the median, so one fill
gives a figure that a busy machine disturbs less.

Memory: the broker's resident set before and after 10,000 producers with distinct names
published one message each to one deduplicated topic (they stay in the maps and in the
snapshot until the inactivity timeout forgets them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pulsar

from bench.brokers import bench_broker
from dedup_broker.devservers import provide_kafka
from harness.admin_http import http_request
from harness.broker_process import BrokerProcess

NEVER = 2_000_000_000
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def _broker(bootstrap: str, **settings: Any) -> BrokerProcess:
    return bench_broker(
        bootstrap, "dedup-state", **({"broker_deduplication_enabled": True} | settings)
    )


def _dedup_stats(broker: BrokerProcess, name: str) -> dict[str, Any]:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/internalStats"
    status, body = http_request("GET", url)
    if status != 200:
        raise RuntimeError(f"internalStats of {name}: HTTP {status}")
    stats: dict[str, Any] = json.loads(body)["deduplication"]
    return stats


def _fill(service_url: str, topic: str, entries: int) -> None:
    """``entries`` SENDs of one producer, no batching: one entry each."""
    client = pulsar.Client(service_url, operation_timeout_seconds=120, logger=QUIET)
    producer = client.create_producer(
        topic,
        producer_name="filler",
        batching_enabled=False,
        max_pending_messages=5000,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    failures: list[pulsar.Result] = []
    acknowledged = threading.Semaphore(0)

    def sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)
        acknowledged.release()

    for i in range(entries):
        producer.send_async(b"e", sent, sequence_id=i)
    producer.flush()
    for _ in range(entries):
        acknowledged.acquire(timeout=300)
    client.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, e.g. {failures[0]}")


def recovery(bootstrap: str, entries: int, recoveries: int = 1) -> dict[str, float]:
    broker = _broker(
        bootstrap,
        broker_deduplication_entries_interval=NEVER,
        broker_deduplication_snapshot_interval_seconds=0,
    )
    name = f"recovery-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    broker_s: list[float] = []
    client_s: list[float] = []
    with broker:
        _fill(broker.service_url, topic, entries)
        for _ in range(recoveries):
            since = _dedup_stats(broker, name)["entriesSinceSnapshot"]
            if since != entries:
                raise RuntimeError(f"expected {entries} entries since the snapshot, saw {since}")
            broker.restart(kill=True)
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=600, logger=QUIET)
            started = time.perf_counter()
            producer = client.create_producer(topic, producer_name="filler")
            client_s.append(time.perf_counter() - started)
            last = producer.last_sequence_id()
            client.close()
            if last != entries - 1:
                raise RuntimeError(f"recovered last_sequence_id {last}, expected {entries - 1}")
            broker_s.append(float(_dedup_stats(broker, name)["lastRecoveryMillis"]) / 1000)
    median = statistics.median(broker_s)
    return {
        "entries": entries,
        "broker_s": median,
        "broker_best_s": min(broker_s),
        "client_s": statistics.median(client_s),
        "entries_per_s": entries / max(median, 1e-9),
    }


def _resident_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def producer_memory(bootstrap: str, producers: int) -> dict[str, float]:
    broker = _broker(bootstrap)
    name = f"producers-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    with broker:
        assert broker.process is not None
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=QUIET)

        def one(i: int) -> None:
            producer = client.create_producer(
                topic, producer_name=f"device-{i:05d}", batching_enabled=False
            )
            producer.send(b"hello", sequence_id=1)
            producer.close()

        one(0)  # loads the topic and enables deduplication
        time.sleep(1)
        before = _resident_kib(broker.process.pid)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(1, producers)))
        time.sleep(1)
        after = _resident_kib(broker.process.pid)
        client.close()
        tracked = _dedup_stats(broker, name)["producers"]
        if tracked != producers:
            raise RuntimeError(f"{tracked} producers tracked, expected {producers}")
    return {
        "producers": producers,
        "rss_before_mib": before / 1024,
        "rss_after_mib": after / 1024,
        "bytes_per_producer": (after - before) * 1024 / (producers - 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="make bench (deduplication state)")
    parser.add_argument("--recovery-entries", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument(
        "--recoveries", type=int, default=1, help="restarts per fill; the median is shown"
    )
    parser.add_argument("--producers", type=int, default=10_000, help="0: no memory figure")
    args = parser.parse_args()
    kafka = provide_kafka()
    try:
        recoveries = [
            recovery(kafka.bootstrap_servers, n, max(1, args.recoveries))
            for n in args.recovery_entries
        ]
        memory = None
        if args.producers > 0:
            memory = producer_memory(kafka.bootstrap_servers, args.producers)
    finally:
        kafka.stop()
    print("\nPIP-6 recovery after kill -9 (entries since the last snapshot)\n")
    print(f"{'entries':>10} {'broker s':>9} {'best s':>7} {'client s':>9} {'entries/s':>10}")
    for r in recoveries:
        print(
            f"{r['entries']:10.0f} {r['broker_s']:9.2f} {r['broker_best_s']:7.2f} "
            f"{r['client_s']:9.2f} {r['entries_per_s']:10.0f}"
        )
    if memory is None:
        return
    print(
        f"\n{memory['producers']:.0f} producers on one topic: broker RSS "
        f"{memory['rss_before_mib']:.1f} -> {memory['rss_after_mib']:.1f} MiB, "
        f"{memory['bytes_per_producer']:.0f} bytes per producer"
    )


if __name__ == "__main__":
    main()
