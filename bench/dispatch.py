"""``python -m bench.dispatch``: reading a topic through the broker next to reading the
same ledger straight from Kafka, in one run on one Kafka.

A topic is filled once with ``pulsar-perf produce`` (batching on, so each stored entry
holds up to 1000 messages). Then:

* **direct Kafka**: one confluent-kafka consumer reads the topic's ledger topics from the
  start (bulk ``consume``, 16 MiB fetches): the same records and bytes the broker
  reads, with nothing done per message. The best a reader of the ledgers can do.
* **through the broker**: ``pulsar-perf consume`` (Java, full JIT) subscribes at
  ``Earliest`` and receives every message; the broker reads the ledgers, splits nothing
  (it dispatches entries as stored) and the client unpacks the batches.
* **Pulsar standalone** (the peer; ``--no-pulsar`` skips it): the same fill and the same
  ``pulsar-perf consume`` against a Pulsar standalone.

Every reader counts the topic's messages; ratios are to direct Kafka. Server CPU is the
broker's and Kafka's (or Pulsar's) during each read.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bench.load_tools import (
    PULSAR_PERF_BATCHING,
    UNLIMITED_RATE,
    Usage,
    process_cpu_seconds,
    run_measured,
)
from dedup_broker.devservers import provide_kafka
from dedup_broker.storage.formats import ledger_topic
from dedup_broker.storage.ledger.ledger_store import FIRST_ENTRY_OFFSET
from harness.broker_process import BrokerProcess
from harness.pulsar_standalone import PulsarStandalone
from harness.pulsar_tools import run_pulsar_perf, write_client_conf

_RECEIVED = re.compile(r"Aggregated throughput stats --- (\d+) records received --- ([\d.]+) msg/s")


def _ledger_ids(http_url: str, topic: str) -> list[int]:
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{http_url}/admin/v2/persistent/{path}/internalStats") as reply:
        stats = json.load(reply)
    return [int(ledger["ledgerId"]) for ledger in stats["ledgers"]]


def direct_read(bootstrap: str, topics: list[str], kafka_pid: int) -> dict[str, float]:
    """Every entry of the ledger ``topics`` (one partition each), as fast as we can."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-dispatch-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    before = process_cpu_seconds(kafka_pid)
    started = time.perf_counter()
    records = size = 0
    try:
        # Offset 0 of a ledger topic is its header; entries follow.
        consumer.assign([TopicPartition(topic, 0, FIRST_ENTRY_OFFSET) for topic in topics])
        finished: set[str] = set()
        while len(finished) < len(topics):
            for msg in consumer.consume(10_000, 1.0):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        finished.add(msg.topic() or "")
                        continue
                    raise RuntimeError(str(error))
                records += 1
                size += len(msg.value() or b"")
    finally:
        consumer.close()
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "records": records,
        "bytes": size,
        "kafka_cpu": process_cpu_seconds(kafka_pid) - before,
    }


def _fill(conf: Path, topic: str, args: argparse.Namespace) -> None:
    filled = run_pulsar_perf(
        conf,
        "produce",
        "-m",
        str(args.messages),
        "-s",
        str(args.size),
        "-r",
        str(UNLIMITED_RATE),
        *PULSAR_PERF_BATCHING,
        topic,
        timeout=600,
        full_jit=True,
    )
    if filled.returncode != 0:
        raise RuntimeError(f"filling failed:\n{filled.stdout[-3000:]}")


def _consume(
    conf: Path, topic: str, args: argparse.Namespace, pids: dict[str, int]
) -> tuple[int, float, Usage]:
    """``pulsar-perf consume`` of the whole topic: (received, msgs/s, CPU meanwhile)."""

    def consume() -> subprocess.CompletedProcess[str]:
        return run_pulsar_perf(
            conf,
            "consume",
            "-ss",
            "bench",
            "-sp",
            "Earliest",
            "-q",
            "10000",
            "-m",
            str(args.messages),
            topic,
            timeout=600,
            full_jit=True,
        )

    result, usage = run_measured(consume, pids)
    output = result.stdout + result.stderr
    found = _RECEIVED.findall(output)
    if not found:
        raise RuntimeError(f"pulsar-perf consume failed:\n{output[-3000:]}")
    return int(found[-1][0]), float(found[-1][1]), usage


def _pulsar_read(args: argparse.Namespace, work: Path) -> tuple[int, float, Usage]:
    """The same fill and read against a Pulsar standalone: the peer's dispatch."""
    with PulsarStandalone() as pulsar:
        assert pulsar.pid is not None
        conf = write_client_conf(work / "pulsar-client.conf", pulsar.service_url, pulsar.http_url)
        topic = f"persistent://public/default/dispatch-{uuid.uuid4().hex[:8]}"
        _fill(conf, topic, args)
        return _consume(conf, topic, args, {"pulsar": pulsar.pid})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dispatch")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--no-pulsar", action="store_true", help="skip the Pulsar standalone")
    args = parser.parse_args()
    kafka = provide_kafka()
    work = Path(tempfile.mkdtemp(prefix="bench-dispatch-"))
    try:
        kafka_pid = kafka.pid
        assert kafka_pid is not None
        broker = BrokerProcess(
            kafka.bootstrap_servers,
            cluster_name=f"bench-dispatch-{uuid.uuid4().hex[:6]}",
            log_dir=work,
        )
        with broker:
            assert broker.process is not None
            conf = write_client_conf(work / "client.conf", broker.service_url, broker.http_url)
            topic = f"persistent://public/default/dispatch-{uuid.uuid4().hex[:8]}"
            _fill(conf, topic, args)
            ledgers = [
                ledger_topic(broker.cluster_name, i) for i in _ledger_ids(broker.http_url, topic)
            ]
            direct = direct_read(kafka.bootstrap_servers, ledgers, kafka_pid)
            received, per_s, usage = _consume(
                conf, topic, args, {"broker": broker.process.pid, "kafka": kafka_pid}
            )
    finally:
        kafka.stop()
    peer = None if args.no_pulsar else _pulsar_read(args, work)
    direct_rate = args.messages / direct["seconds"]
    mb = args.messages * args.size / 1e6
    print(
        f"\ndispatch: {args.messages:,} messages of {args.size} B in "
        f"{direct['records']:,.0f} entries ({direct['bytes'] / 1e6:.1f} MB stored)\n"
    )
    print(f"{'':28} {'msgs/s':>12} {'MB/s':>8} {'ratio':>6} {'server CPU us/msg':>18}")
    print(
        f"{'direct Kafka (ledgers)':28} {direct_rate:12,.0f} {mb / direct['seconds']:8.1f} "
        f"{1.0:6.2f} {1e6 * direct['kafka_cpu'] / args.messages:18.2f}"
    )
    server = sum(usage.server.values())
    print(
        f"{'through the broker':28} {per_s:12,.0f} {per_s * args.size / 1e6:8.1f} "
        f"{per_s / direct_rate:6.2f} {1e6 * server / max(received, 1):18.2f}"
        f"  (broker {1e6 * usage.server['broker'] / max(received, 1):.2f}"
        f" + Kafka {1e6 * usage.server['kafka'] / max(received, 1):.2f};"
        f" received {received:,}; generator {1e6 * usage.generator / max(received, 1):.2f})"
    )
    if peer is not None:
        got, rate, spent = peer
        print(
            f"{'Pulsar standalone':28} {rate:12,.0f} {rate * args.size / 1e6:8.1f} "
            f"{rate / direct_rate:6.2f} {1e6 * spent.server['pulsar'] / max(got, 1):18.2f}"
            f"  (received {got:,}; generator {1e6 * spent.generator / max(got, 1):.2f})"
        )


if __name__ == "__main__":
    main()
