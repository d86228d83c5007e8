"""``make bench`` (scrape): what ``/metrics`` costs a broker serving many topics.

The real broker domain over in-memory storage (``harness.memory_broker``), N topics each
with a producer that published one message and a subscription with a consumer, the
stats update run once. Measured: the time to render ``/metrics`` (the sliced path the
HTTP route uses, and prometheus_client's one-go ``generate_latest`` for comparison), the
longest the event loop went without serving a 1 ms timer during the render (wall and
CPU time: the machine's other processes inflate the first), and the
latency of publishes on one topic made back to back while no scrape runs and while
scrapes run without pause. No Kafka: the figures are the broker's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from prometheus_client import CollectorRegistry

from dedup_broker.metrics_registry import exposition, exposition_chunks
from harness.domain_links import ConsumerSide, new_producer, publish, subscribe
from harness.memory_broker import MemoryBroker

NAMESPACE = "persistent://public/default"


async def loaded_broker(topics: int) -> MemoryBroker:
    broker = MemoryBroker()
    side = ConsumerSide()
    for index in range(topics):
        topic = await broker.topic(f"{NAMESPACE}/scrape-{index}")
        producer = new_producer(f"p-{index}")
        topic.add_producer(producer)
        await publish(topic, producer, 0)
        await subscribe(topic, side, f"c-{index}")
    await broker.broker.update_stats()
    return broker


async def scrape(registry: CollectorRegistry) -> tuple[int, int]:
    """Bytes and lines of ``/metrics``, streamed as the HTTP route streams them."""
    size = lines = 0
    async for chunk in exposition_chunks(registry):
        size += len(chunk)
        lines += chunk.count(b"\n")
    return size, lines


async def longest_stall(work: asyncio.Future[tuple[int, int]]) -> tuple[float, float]:
    """How long a 1 ms timer waited beyond its time while ``work`` ran, at worst: in wall
    time (the machine's other processes included) and in this thread's CPU time (what
    the loop spent on other callbacks meanwhile, the scrape's slices), seconds."""
    wall = cpu = 0.0
    while not work.done():
        started, used = time.perf_counter(), time.thread_time()
        await asyncio.sleep(0.001)
        wall = max(wall, time.perf_counter() - started - 0.001)
        cpu = max(cpu, time.thread_time() - used)
    return wall, cpu


async def publish_latencies(broker: MemoryBroker, seconds: float, name: str) -> list[float]:
    topic = await broker.topic(f"{NAMESPACE}/scrape-{name}")
    producer = new_producer(name)
    topic.add_producer(producer)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    sequence = 0
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        await publish(topic, producer, sequence)
        latencies.append(time.perf_counter() - started)
        sequence += 1
        await asyncio.sleep(0.0005)  # a steady client, not a flood
    return latencies


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return 1000 * ordered[int(len(ordered) * 0.99) - 1]


async def scrape_all_along(broker: MemoryBroker, stop: asyncio.Event) -> int:
    scrapes = 0
    while not stop.is_set():
        await scrape(broker.broker.metrics.registry)
        scrapes += 1
    return scrapes


async def run(topics: int, seconds: float) -> None:
    started = time.perf_counter()
    broker = await loaded_broker(topics)
    print(f"{topics} topics loaded in {time.perf_counter() - started:.1f} s")
    registry = broker.broker.metrics.registry
    gc.collect()
    renders: list[float] = []
    cpu: list[float] = []
    stalls: list[tuple[float, float]] = []
    size = lines = 0
    for _ in range(3):
        begun, used = time.perf_counter(), time.thread_time()
        work = asyncio.ensure_future(scrape(registry))
        stalls.append(await longest_stall(work))
        size, lines = work.result()
        renders.append(time.perf_counter() - begun)
        cpu.append(time.thread_time() - used)
    begun = time.perf_counter()
    exposition(registry)
    one_go = time.perf_counter() - begun
    quiet = await publish_latencies(broker, seconds, "quiet")
    stop = asyncio.Event()
    scraping = asyncio.ensure_future(scrape_all_along(broker, stop))
    busy = await publish_latencies(broker, seconds, "busy")
    stop.set()
    scrapes = await scraping
    print(f"/metrics: {size / 1e6:.1f} MB, {lines} lines")
    print(f"{'':38} {'seconds':>9}")
    print(f"{'render, sliced (median of 3)':38} {statistics.median(renders):9.3f}")
    print(f"{'render, sliced, CPU (median of 3)':38} {statistics.median(cpu):9.3f}")
    print(f"{'render, generate_latest in one go':38} {one_go:9.3f}")
    print(f"{'longest loop stall in a render, wall':38} {max(w for w, _ in stalls):9.4f}")
    print(f"{'longest loop stall in a render, CPU':38} {max(c for _, c in stalls):9.4f}")
    print(f"\npublishes on one topic{'':16} {'count':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for label, latencies in (("no scrape", quiet), (f"{scrapes} scrapes back to back", busy)):
        median = 1000 * statistics.median(latencies)
        print(f"{label:38} {len(latencies):9d} {median:8.3f} {p99_ms(latencies):8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scrape")
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0, help="publishing, per phase")
    args = parser.parse_args()
    asyncio.run(run(args.topics, args.seconds))


if __name__ == "__main__":
    main()
