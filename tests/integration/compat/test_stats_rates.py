"""Rates and sizes in ``pulsar-admin topics stats`` and ``partitioned-stats`` (the
official CLI, 4.0.6): the Python client produces and consumes at a known pace on a broker
with ``statsUpdateFrequencyInSecs=1``, and the CLI reads them while it runs; then a
subscription consumes part of what was stored and its backlog is read.

Rates are averages over the last stats period, so they are checked within bands of the
pace the clients kept around the reading (a loaded machine stalls them at times);
throughputs as rates times message sizes; counters and backlogs exactly."""

from __future__ import annotations

import bisect
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests

from harness.broker_process import BrokerProcess
from harness.pulsar_tools import ensure_pulsar_tools, run_pulsar_admin_batch, write_client_conf
from tests.integration.conftest import serve

RATE = 40.0
"""Messages per second sent to each topic."""
PAYLOAD = 1024
PARTITIONS = 2


@pytest.fixture
def stats_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from serve(kafka_bootstrap, tmp_path, stats_update_frequency_in_secs=1)


class Pace:
    """When messages were sent or received, to tell what pace the clients really kept
    (a loaded machine stalls them now and then)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def mark(self) -> None:
        self.times.append(time.monotonic())

    def band(self, start: float, end: float) -> tuple[float, float]:
        """The fewest and the most messages of any one second ending between ``start``
        and ``end``."""
        times = sorted(self.times)
        counts = [
            bisect.bisect_right(times, at) - bisect.bisect_right(times, at - 1.0)
            for at in (start + step * 0.05 for step in range(int((end - start) / 0.05) + 1))
        ]
        return min(counts), max(counts)


class PacedProducers:
    """Sends one message to each producer every ``1 / RATE`` s, in a thread, until
    stopped. A late send does not make up for lost time: the pace never goes above
    ``RATE``."""

    def __init__(self, producers: list[pulsar.Producer]) -> None:
        self._producers = producers
        self._stop = threading.Event()
        self.sent = [0] * len(producers)
        self.pace = Pace()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PacedProducers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        payload = b"x" * PAYLOAD
        due = time.monotonic()
        while not self._stop.is_set():
            for index, producer in enumerate(self._producers):
                producer.send(payload)
                self.sent[index] += 1
            self.pace.mark()
            due = max(due + 1 / RATE, time.monotonic())
            self._stop.wait(max(0.0, due - time.monotonic()))


def admin_json(outcome: Any) -> dict[str, Any]:
    assert outcome.exit_code == 0, (outcome.args, outcome.output[-2000:])
    text: str = outcome.output
    parsed: dict[str, Any] = json.loads(text[text.index("{") :])
    return parsed


def assert_in_band(value: float, band: tuple[float, float], what: str, share: float = 1) -> None:
    """``value`` (a rate over one stats period) is near what the clients did over some
    second around it: within 30% below its slowest second and above its fastest."""
    low, high = band[0] * share, band[1] * share
    assert 0.7 * low - 1 <= value <= 1.3 * high + 1, (
        f"{what}: {value}, the clients did {low}-{high}"
    )


def acknowledging(pace: Pace) -> Callable[[pulsar.Consumer, pulsar.Message], None]:
    def listener(consumer: pulsar.Consumer, message: pulsar.Message) -> None:
        pace.mark()
        consumer.acknowledge(message)

    return listener


def assert_message_size(stats: dict[str, Any]) -> None:
    """Throughput is the rate times the message size: its payload and its metadata (tens
    of bytes)."""
    if stats["msgRateIn"] == 0:  # the producer stalled for a whole period
        assert stats["msgThroughputIn"] == stats["averageMsgSize"] == 0
        return
    assert PAYLOAD <= stats["averageMsgSize"] <= PAYLOAD + 200, stats["averageMsgSize"]
    assert stats["msgThroughputIn"] == pytest.approx(stats["msgRateIn"] * stats["averageMsgSize"])


def rest_backlogs(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """The backlogs of the ``slow`` and ``live`` subscriptions, through the REST API."""
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    subscriptions = requests.get(url, timeout=10).json()["subscriptions"]
    return subscriptions["slow"]["msgBacklog"], subscriptions["live"]["msgBacklog"]


def test_rates_and_sizes_as_pulsar_admin_prints_them(
    stats_broker: BrokerProcess, tmp_path: Path
) -> None:
    ensure_pulsar_tools()
    conf = write_client_conf(
        tmp_path / "client.conf", stats_broker.service_url, stats_broker.http_url
    )
    suffix = uuid.uuid4().hex[:8]
    topic = f"persistent://public/default/rates-{suffix}"
    partitioned = f"persistent://public/default/rates-partitioned-{suffix}"
    created = requests.put(
        f"{stats_broker.http_url}/admin/v2/persistent/public/default/rates-partitioned-{suffix}"
        "/partitions",
        data=str(PARTITIONS),
        timeout=10,
    )
    assert created.status_code == 204, created.text
    client = pulsar.Client(stats_broker.service_url, operation_timeout_seconds=30)
    try:
        # A durable subscription that reads nothing while the producers run.
        client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest).close()
        received = {topic: Pace(), partitioned: Pace()}
        for name, pace in received.items():
            client.subscribe(
                name,
                "live",
                consumer_type=pulsar.ConsumerType.Shared,
                message_listener=acknowledging(pace),
            )
        producers = [
            client.create_producer(topic, batching_enabled=False),
            client.create_producer(
                partitioned,
                batching_enabled=False,
                message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            ),
        ]
        with PacedProducers(producers) as paced:
            time.sleep(3.5)  # two full stats periods at least
            asked = time.monotonic()
            running = run_pulsar_admin_batch(
                conf,
                [
                    ["topics", "stats", topic],
                    ["topics", "partitioned-stats", partitioned, "--per-partition"],
                    ["topics", "partitioned-stats", partitioned],
                ],
            )
            answered = time.monotonic()
        sent = paced.sent[0]
        # The last stats period before each answer ended in these seconds.
        produced = paced.pace.band(asked - 2.5, answered)
        delivered = received[topic].band(asked - 2.5, answered)

        stats = admin_json(running[0])
        assert_in_band(stats["msgRateIn"], produced, "msgRateIn")
        assert_message_size(stats)
        assert_in_band(stats["msgRateOut"], delivered, "msgRateOut")
        entry_size = stats["storageSize"] / stats["msgInCounter"]
        assert stats["msgThroughputOut"] == pytest.approx(
            stats["msgRateOut"] * entry_size, rel=0.02
        )
        (publisher,) = stats["publishers"]
        assert publisher["msgRateIn"] == pytest.approx(stats["msgRateIn"])
        assert publisher["msgThroughputIn"] == pytest.approx(stats["msgThroughputIn"])
        assert publisher["averageMsgSize"] == pytest.approx(stats["averageMsgSize"])
        live = stats["subscriptions"]["live"]
        assert live["msgRateOut"] == pytest.approx(stats["msgRateOut"])
        assert live["msgThroughputOut"] == pytest.approx(stats["msgThroughputOut"])
        assert live["msgRateRedeliver"] == 0
        (live_consumer,) = live["consumers"]
        assert live_consumer["msgRateOut"] == pytest.approx(live["msgRateOut"])
        slow = stats["subscriptions"]["slow"]
        assert slow["msgRateOut"] == 0
        assert slow["msgBacklog"] > 0
        assert stats["backlogSize"] == slow["backlogSize"] > 0  # the slowest subscription's
        assert stats["storageSize"] >= stats["msgInCounter"] * PAYLOAD

        per_partition = admin_json(running[1])
        assert per_partition["metadata"]["partitions"] == PARTITIONS
        partitions = per_partition["partitions"]
        assert sorted(partitions) == [f"{partitioned}-partition-{i}" for i in range(PARTITIONS)]
        assert_in_band(per_partition["msgRateIn"], produced, "partitioned msgRateIn")
        assert_message_size(per_partition)
        assert_in_band(
            per_partition["msgRateOut"],
            received[partitioned].band(asked - 2.5, answered),
            "partitioned msgRateOut",
        )
        for key in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut"):
            total = sum(p[key] for p in partitions.values())
            assert per_partition[key] == pytest.approx(total), key
        for key in ("msgInCounter", "bytesInCounter", "storageSize", "backlogSize"):
            assert per_partition[key] == sum(p[key] for p in partitions.values()), key
        for each in partitions.values():
            assert_in_band(each["msgRateIn"], produced, "a partition's msgRateIn", 1 / PARTITIONS)
        assert per_partition["subscriptions"]["live"]["msgRateOut"] == pytest.approx(
            sum(p["subscriptions"]["live"]["msgRateOut"] for p in partitions.values())
        )
        totals_only = admin_json(running[2])
        assert totals_only["metadata"]["partitions"] == PARTITIONS
        assert totals_only["partitions"] == {}
        assert totals_only["msgInCounter"] > 0

        # Part of the stored messages consumed: the backlog is what is left, exactly.
        consumed = sent // 3
        reader = client.subscribe(topic, "slow")
        last = None
        for _ in range(consumed):
            last = reader.receive(timeout_millis=10_000)
        assert last is not None
        reader.acknowledge_cumulative(last)
        reader.close()
        deadline = time.monotonic() + 20
        while (backlogs := rest_backlogs(stats_broker, topic)) != (sent - consumed, 0):
            assert time.monotonic() < deadline, backlogs  # acknowledgements still on their way
            time.sleep(0.2)
        time.sleep(2.5)  # two stats periods without traffic
        quiet = admin_json(run_pulsar_admin_batch(conf, [["topics", "stats", topic]])[0])
    finally:
        client.close()
    assert quiet["msgInCounter"] == sent
    slow = quiet["subscriptions"]["slow"]
    assert slow["msgBacklog"] == sent - consumed
    assert quiet["subscriptions"]["live"]["msgBacklog"] == 0
    assert quiet["backlogSize"] == slow["backlogSize"]
    entry_size = quiet["storageSize"] / sent
    assert slow["backlogSize"] == pytest.approx((sent - consumed) * entry_size, rel=0.01)
    assert quiet["storageSize"] >= sent * PAYLOAD
    assert (quiet["msgRateIn"], quiet["msgRateOut"], quiet["averageMsgSize"]) == (0, 0, 0)
