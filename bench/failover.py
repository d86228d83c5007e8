"""``make bench`` part: failover as the official clients see it.

Three brokers of one cluster on one Kafka, with the product's settings (Kafka session
``metadataStoreSessionTimeoutMillis`` 30 s, ``clusterPeerTimeoutMillis`` 6 s) and
PIP-6 deduplication on. Two load processes run throughout, each with one producer per
topic (``send_timeout`` 0, batching off, 10 messages a second, every broker in a
multi-host service URL): the official Python client on 12 topics and the official Java
client on 12 others. Faults, one at a time, each on a broker drawn at random:

- ``kill-9``: the broker is killed, then started again once every topic acknowledges;
- ``sigstop``: the broker is frozen for ``--pause`` seconds (longer than the peer
  timeout: it loses its slots), then thawed;
- ``leave``: the broker stops gracefully (SIGTERM), then starts again;
- ``unload``: every topic the broker serves is unloaded.

For each fault and each client, two figures:

- **back after**: the time from the fault until every topic of that client acknowledged a
  message sent after the fault (the topics of other brokers do so at once);
- **longest pause**, the longest time any one topic went without an acknowledgement, in
  two parts of the cycle: during the fault (from the fault until the broker is started
  again or thawed) and during its return (from then until the cluster settled, its slots
  handed back included). A graceful leave can be "back" at once (the leaving broker still
  acknowledges while it hands its slots over) and still pause its topics during the
  handover: this figure shows it. With no fault it is the send interval (0.1 s).

Reported: p50, p99 and max per fault kind, client and figure.

    python -m bench.failover [--faults 20] [--kinds kill-9,sigstop,leave,unload]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pulsar

from bench.results import record
from dedup_broker.devservers import provide_kafka
from harness.broker_process import BrokerProcess
from harness.cluster_processes import ClusterProcesses
from harness.pulsar_java import java_client_command

TOPICS = 12
RATE = 10.0
KINDS = ("kill-9", "sigstop", "leave", "unload")
SETTINGS = {
    "broker_deduplication_enabled": True,
    # The product's defaults (test brokers shorten the peer timeout).
    "metadata_store_session_timeout_millis": 30000,
    "cluster_peer_timeout_millis": 6000,
}


@dataclass
class Acks:
    """Per topic, the (sent, acknowledged) times in epoch seconds, appended as they come."""

    topics: int
    times: list[list[tuple[float, float]]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.times = [[] for _ in range(self.topics)]

    def add(self, topic: int, sent: float, acked: float) -> None:
        with self.lock:
            self.times[topic].append((sent, acked))

    def recovered_after(self, fault: float) -> float | None:
        """Seconds from ``fault`` until every topic acknowledged a message sent after it."""
        with self.lock:
            firsts = [min((a for s, a in t if s >= fault), default=None) for t in self.times]
        if any(first is None for first in firsts):
            return None
        return max(first for first in firsts if first is not None) - fault

    def longest_pause(self, start: float, stop: float) -> float:
        """The longest time between ``start`` and ``stop`` that one topic went without an
        acknowledgement."""
        with self.lock:
            per_topic = [sorted(a for _s, a in t if start <= a <= stop) for t in self.times]
        longest = 0.0
        for acked in per_topic:
            marks = [start, *acked, stop]
            longest = max(longest, *(b - a for a, b in pairwise(marks)))
        return longest


def _python_load(service_url: str, topics: list[str], seconds: float, out: Any) -> None:
    """A process of its own: one producer per topic, acknowledgements sent to ``out``."""
    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    producers = [
        client.create_producer(
            t, producer_name=f"python-{i}", send_timeout_millis=0, batching_enabled=False
        )
        for i, t in enumerate(topics)
    ]
    out.put(("ready",))
    start = time.monotonic()
    for n in range(int(seconds * RATE)):
        delay = start + n / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for index, producer in enumerate(producers):
            sent = time.time()

            def done(
                result: pulsar.Result, _id: object, index: int = index, sent: float = sent
            ) -> None:
                if result == pulsar.Result.Ok:
                    out.put(("acked", index, sent, time.time()))
                else:
                    out.put(("failed", index, str(result)))

            producer.send_async(b"%d" % n, done, sequence_id=n)
    for producer in producers:
        producer.flush()
    client.close()


def _follow_python(queue: Any, acks: Acks, ready: threading.Event) -> None:
    while True:
        item = queue.get()
        if item[0] == "ready":
            ready.set()
        elif item[0] == "acked":
            acks.add(item[1], item[2], item[3])
        elif item[0] == "failed":
            acks.failures.append(item[2])
        else:
            return


def _follow_java(process: subprocess.Popen[str], acks: Acks, ready: threading.Event) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["event"] == "ready":
            ready.set()
        elif event["event"] == "acked":
            acks.add(event["topic"], event["sent"] / 1000, event["at"] / 1000)
        elif event["event"] == "failed":
            acks.failures.append(event["error"])


def _topics_of(cluster: ClusterProcesses, broker: BrokerProcess, topics: list[str]) -> list[str]:
    mine = []
    for topic in topics:
        local = topic.removeprefix("persistent://")
        url = f"{broker.http_url}/lookup/v2/topic/persistent/{local}"
        with urllib.request.urlopen(url, timeout=40) as response:
            if json.loads(response.read())["brokerUrl"] == broker.service_url:
                mine.append(topic)
    return mine


def _wait(recovered: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if recovered():
            return True
        time.sleep(0.2)
    return False


def _start_again(broker: BrokerProcess) -> float:
    """Start ``broker`` again; returns when the start began (the fault's part ends)."""
    back = time.time()
    broker.start(timeout=120)
    return back


def _inject(
    kind: str, cluster: ClusterProcesses, broker: BrokerProcess, pause: float, all_topics: list[str]
) -> tuple[float, Callable[[], float]]:
    """Starts the fault; returns its time and what ends it (run once every topic is back),
    which returns when the broker was started again or thawed."""
    assert broker.process is not None
    if kind == "kill-9":
        at = time.time()
        broker.kill()

        return at, lambda: _start_again(broker)
    if kind == "sigstop":
        at = time.time()
        broker.process.send_signal(signal.SIGSTOP)
        timer = threading.Timer(pause, broker.process.send_signal, (signal.SIGCONT,))
        timer.start()

        def thawed() -> float:
            timer.join()
            return at + pause

        return at, thawed
    if kind == "leave":
        at = time.time()
        threading.Thread(target=broker.stop, daemon=True).start()

        def start_again() -> float:
            _wait(lambda: broker.process is None or broker.process.poll() is not None, 90)
            return _start_again(broker)

        return at, start_again
    mine = _topics_of(cluster, broker, all_topics)
    at = time.time()
    for topic in mine:
        local = topic.removeprefix("persistent://")
        request = urllib.request.Request(
            f"{broker.http_url}/admin/v2/persistent/{local}/unload", method="PUT"
        )
        urllib.request.urlopen(request, timeout=60).close()
    return at, time.time  # nothing to undo: the fault's part ends once every topic is back


def _recovery(acks: Acks, at: float, timeout: float = 120.0) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gap = acks.recovered_after(at)
        if gap is not None:
            return gap
        time.sleep(0.2)
    return None


def _percentiles(values: list[float]) -> str:
    if not values:
        return "no faults measured"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"p50 {statistics.median(ordered):5.1f} s  p99 {p99:5.1f} s  max {ordered[-1]:5.1f} s"
        f"  ({len(ordered)} faults)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.failover")
    parser.add_argument("--faults", type=int, default=20, help="faults of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--pause", type=float, default=10.0, help="seconds a broker is frozen")
    parser.add_argument("--seed", type=int, default=20261126)
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    rng = random.Random(args.seed)
    budget = len(kinds) * args.faults * (args.pause + 40) + 300
    kafka = provide_kafka()
    cluster = ClusterProcesses(
        kafka.bootstrap_servers, Path(tempfile.mkdtemp(prefix="bench-failover-")), 3, SETTINGS
    )
    results: dict[tuple[str, str], list[float]] = {}
    pauses: dict[tuple[str, str], list[float]] = {}
    return_pauses: dict[tuple[str, str], list[float]] = {}
    try:
        cluster.start()
        service_url = cluster.service_url
        tag = uuid.uuid4().hex[:6]
        python_topics = [f"persistent://public/default/fo-{tag}-py-{i}" for i in range(TOPICS)]
        java_topics = [f"persistent://public/default/fo-{tag}-java-{i}" for i in range(TOPICS)]
        clients = {"python": Acks(TOPICS), "java": Acks(TOPICS)}
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        python = ctx.Process(target=_python_load, args=(service_url, python_topics, budget, queue))
        python.start()
        java = subprocess.Popen(
            java_client_command(
                "steady", service_url, ",".join(java_topics), str(RATE), str(budget)
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = {name: threading.Event() for name in clients}
        threading.Thread(
            target=_follow_python, args=(queue, clients["python"], ready["python"]), daemon=True
        ).start()
        threading.Thread(
            target=_follow_java, args=(java, clients["java"], ready["java"]), daemon=True
        ).start()
        for name, event in ready.items():
            if not event.wait(120):
                raise RuntimeError(f"the {name} load did not start")
        time.sleep(5)
        for number in range(args.faults):
            for kind in kinds:
                broker = rng.choice(cluster.running())
                at, end = _inject(kind, cluster, broker, args.pause, python_topics + java_topics)
                for name, acks in clients.items():
                    gap = _recovery(acks, at)
                    if gap is not None:
                        results.setdefault((kind, name), []).append(gap)
                        print(
                            f"{kind:8} #{number + 1:2} {name:6} every topic back after {gap:.1f} s",
                            flush=True,
                        )
                    else:
                        print(
                            f"{kind:8} #{number + 1:2} {name:6} not back within 120 s", flush=True
                        )
                back = end()
                cluster.wait_settled(120)
                time.sleep(3)
                for name, acks in clients.items():
                    during = acks.longest_pause(at, back)
                    returning = acks.longest_pause(back, time.time() - 1)
                    pauses.setdefault((kind, name), []).append(during)
                    return_pauses.setdefault((kind, name), []).append(returning)
                    print(
                        f"{kind:8} #{number + 1:2} {name:6} longest pause of a topic: "
                        f"{during:.1f} s in the fault, {returning:.1f} s in the return",
                        flush=True,
                    )
        java.terminate()
        python.terminate()
        queue.put(("end",))
        failures = {name: len(acks.failures) for name, acks in clients.items()}
    finally:
        cluster.stop()
        kafka.stop()
    print(
        f"\nfailover: 3 brokers, {TOPICS} topics per client at {RATE:.0f} msgs/s each, "
        f"{args.faults} faults of each kind"
    )
    figures = (
        ("back after", results),
        ("longest pause in the fault", pauses),
        ("longest pause in the return", return_pauses),
    )
    for figure, values in figures:
        print(f" {figure}:")
        for kind in kinds:
            for name in clients:
                print(f"  {kind:8} {name:6} {_percentiles(values.get((kind, name), []))}")
    print(f"  failed sends: {failures}")
    record("bench.failover", recorded(kinds, list(clients), args.faults, dict(figures)))


def recorded(
    kinds: list[str],
    clients: list[str],
    faults: int,
    figures: dict[str, dict[tuple[str, str], list[float]]],
) -> dict[str, Any]:
    """What ``bench.plots`` draws: per fault kind, client and figure, every value (s)."""
    return {
        "faults": faults,
        "topics_per_client": TOPICS,
        "figures": list(figures),
        "kinds": {
            kind: {
                client: {
                    figure: values.get((kind, client), []) for figure, values in figures.items()
                }
                for client in clients
            }
            for kind in kinds
        },
    }


if __name__ == "__main__":
    main()
