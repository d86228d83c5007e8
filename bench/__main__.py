"""``make bench``: publish throughput and latency through the broker vs. direct Kafka.

Every figure is measured in one run on the same Kafka, and the broker's throughput is
reported as a ratio to the direct baseline, which writes one Kafka record per message of
the same size with an idempotent ``acks=all`` producer.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

import pulsar
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import spark_connectors
from bench.brokers import bench_broker
from bench.key_dedup import key_dedup_rows
from dedup_broker.devservers import provide_kafka


def direct_kafka(bootstrap: str, count: int, size: int) -> dict[str, float]:
    topic = f"bench-direct-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
        }
    )
    payload = b"x" * size
    latencies: list[float] = []
    done = 0

    def delivered(err: object, _msg: object, started: float) -> None:
        nonlocal done
        done += 1
        latencies.append(time.perf_counter() - started)

    start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        while True:
            try:
                producer.produce(
                    topic, payload, on_delivery=lambda e, m, t0=t0: delivered(e, m, t0)
                )
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - start
    return _figures(count, size, elapsed, latencies)


def through_broker(service_url: str, count: int, size: int, batching: bool) -> dict[str, float]:
    topic = f"persistent://public/default/bench-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1,
        max_pending_messages=20000,
        block_if_queue_full=True,
    )
    payload = b"x" * size
    latencies: list[float] = []
    finished = threading.Event()
    lock = threading.Lock()

    def sent(result: pulsar.Result, _mid: pulsar.MessageId, started: float) -> None:
        with lock:
            latencies.append(time.perf_counter() - started)
            if len(latencies) == count:
                finished.set()

    start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        producer.send_async(payload, lambda r, m, t0=t0: sent(r, m, t0))
    producer.flush()
    finished.wait(120)
    elapsed = time.perf_counter() - start
    client.close()
    return _figures(count, size, elapsed, latencies)


def _figures(count: int, size: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "msgs_per_s": count / elapsed,
        "mb_per_s": count * size / elapsed / 1e6,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[int(len(ordered) * 0.99) - 1],
        "mean_ms": 1000 * statistics.fmean(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    kafka = provide_kafka()
    rows: list[tuple[str, dict[str, float]]] = []
    key_rows: list[tuple[str, float]] = []
    try:
        bootstrap = kafka.bootstrap_servers
        rows.append(("direct Kafka (baseline)", direct_kafka(bootstrap, args.messages, args.size)))
        for dedup in (False, True):
            broker = bench_broker(bootstrap, "client", broker_deduplication_enabled=dedup)
            with broker:
                label = "dedup on" if dedup else "dedup off"
                rows.append(
                    (
                        f"broker, batching on, {label}",
                        through_broker(broker.service_url, args.messages, args.size, True),
                    )
                )
                if not dedup:
                    rows.append(
                        (
                            "broker, batching off",
                            through_broker(
                                broker.service_url, args.messages // 10, args.size, False
                            ),
                        )
                    )
        key_rows = key_dedup_rows(kafka.bootstrap_servers, args.messages, args.size)
        spark_connectors.run(bootstrap, args.messages, args.size)
    finally:
        kafka.stop()
    base = rows[0][1]["msgs_per_s"]
    print(f"\n{args.messages} messages of {args.size} bytes (batching off: a tenth of them)\n")
    print(f"{'':34} {'msgs/s':>10} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>6}")
    for label, r in rows:
        print(
            f"{label:34} {r['msgs_per_s']:10.0f} {r['mb_per_s']:7.2f} {r['p50_ms']:8.2f} "
            f"{r['p99_ms']:8.2f} {r['msgs_per_s'] / base:6.2f}"
        )
    off = next(r for label, r in rows if label.endswith("dedup off"))
    on = next(r for label, r in rows if label.endswith("dedup on"))
    print(f"\ndedup on / off throughput: {on['msgs_per_s'] / off['msgs_per_s']:.2f}")
    print("\nkey-window deduplication (property keys, 20% repeats, batching on):")
    for label, figure in key_rows:
        print(f"  {label:34} {figure:12.4f}")


if __name__ == "__main__":
    main()
