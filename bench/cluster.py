"""``make bench`` part: aggregate publish throughput with 1, 2 and 3 broker processes of
one cluster, next to a tuned direct Kafka producer measured in the same run.

Several load-generator processes (one official client each, batching on, asynchronous
sends, nothing per message but a counter) write 100-byte messages to several topics, so
that the generator is not what limits. The baseline is the same number of processes
with a tuned confluent-kafka producer (idempotent, ``acks=all``, ``linger.ms=5``,
``batch.num.messages=10000``, no per-message callback) on as many Kafka topics.
Latency is measured separately at a fixed rate (half the one-broker maximum).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from dedup_broker.devservers import provide_kafka
from harness.cluster_processes import ClusterProcesses

SIZE = 100


def _direct_worker(bootstrap: str, topics: list[str], count: int, out: Any) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    payload = b"x" * SIZE
    started = time.perf_counter()
    for i in range(count):
        topic = topics[i % len(topics)]
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.005)
    producer.flush(120)
    out.put((count, started, time.perf_counter()))


def _broker_worker(service_url: str, topics: list[str], count: int, out: Any) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    producers = [
        client.create_producer(
            t,
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
            max_pending_messages=50_000,
            block_if_queue_full=True,
        )
        for t in topics
    ]
    payload = b"x" * SIZE
    acked = [0]

    def counted(_result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        acked[0] += 1

    started = time.perf_counter()
    for i in range(count):
        producers[i % len(producers)].send_async(payload, counted)
    for producer in producers:
        producer.flush()
    out.put((acked[0], started, time.perf_counter()))
    client.close()


def _paced_worker(service_url: str, topic: str, rate: float, seconds: float, out: Any) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=5,
        batching_max_messages=1000,
        block_if_queue_full=True,
    )
    latencies: list[float] = []
    failures: list[object] = []

    def timed(sent: float) -> object:
        def done(result: object, _message: object) -> None:
            if result == pulsar.Result.Ok:
                latencies.append(time.perf_counter() - sent)
            else:  # a failed send has no latency; the run reports it
                failures.append(result)

        return done

    payload = b"x" * SIZE
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(payload, timed(time.perf_counter()))
    producer.flush()
    if failures:
        raise RuntimeError(f"{len(failures)} paced sends failed, e.g. {failures[0]}")
    out.put(latencies)
    client.close()


def _run_parallel(target: Any, jobs: list[tuple[Any, ...]]) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*job, out)) for job in jobs]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(60)
    return results


def _throughput(results: list[Any]) -> float:
    done = sum(r[0] for r in results)
    started = min(r[1] for r in results)
    ended = max(r[2] for r in results)
    return done / (ended - started)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster")
    parser.add_argument("--messages", type=int, default=400_000, help="per configuration")
    parser.add_argument("--processes", type=int, default=4, help="load generators")
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.processes, args.topics = 20_000, 2, 4
    kafka = provide_kafka()
    rows: list[tuple[str, float]] = []
    paced: list[float] = []
    try:
        bootstrap = kafka.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        direct_topics = [f"bench-direct-{uuid.uuid4().hex[:8]}" for _ in range(args.topics)]
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in direct_topics]).values():
            future.result(30)
        per_process = args.messages // args.processes
        jobs = [
            (bootstrap, direct_topics[p :: args.processes] or direct_topics, per_process)
            for p in range(args.processes)
        ]
        rows.append(
            ("direct Kafka (tuned producer)", _throughput(_run_parallel(_direct_worker, jobs)))
        )
        one_broker_max = 0.0
        for size in (1, 2, 3):
            cluster = ClusterProcesses(
                bootstrap, Path(tempfile.mkdtemp(prefix="bench-cluster-")), size=size
            )
            try:
                cluster.start()
                topics = [
                    f"persistent://public/default/bc-{uuid.uuid4().hex[:8]}"
                    for _ in range(args.topics)
                ]
                jobs = [
                    (cluster.service_url, topics[p :: args.processes] or topics, per_process)
                    for p in range(args.processes)
                ]
                rate = _throughput(_run_parallel(_broker_worker, jobs))
                rows.append((f"{size} broker{'s' if size > 1 else ''}", rate))
                if size == 1:
                    one_broker_max = rate
                    seconds = 5.0 if args.quick else 15.0
                    latency_jobs = [
                        (
                            cluster.service_url,
                            topics[p],
                            one_broker_max / 2 / args.processes,
                            seconds,
                        )
                        for p in range(args.processes)
                    ]
                    for result in _run_parallel(_paced_worker, latency_jobs):
                        paced.extend(result)
            finally:
                cluster.stop()
    finally:
        kafka.stop()
    base = rows[0][1]
    print(
        f"\ncluster: {args.messages} messages of {SIZE} bytes, {args.processes} generator "
        f"processes, {args.topics} topics, batching on\n"
    )
    print(f"{'':32} {'msgs/s':>10} {'MB/s':>7} {'ratio':>6}")
    for label, rate in rows:
        print(f"{label:32} {rate:10.0f} {rate * SIZE / 1e6:7.2f} {rate / base:6.2f}")
    if paced:
        ordered = sorted(paced)
        print(
            f"\n1 broker at {one_broker_max / 2:.0f} msgs/s (half its maximum): "
            f"p50 {1000 * statistics.median(ordered):.1f} ms, "
            f"p99 {1000 * ordered[int(len(ordered) * 0.99) - 1]:.1f} ms"
        )


if __name__ == "__main__":
    main()
